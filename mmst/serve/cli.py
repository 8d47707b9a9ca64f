"""``mmst-serve``: live simultaneous translation over WebSocket, with a web page, for many clients.

Usage::

    mmst-serve --model exp/synthetic/model_export
    mmst-serve --model MODEL_DIR --tgt-langs de,es --policy alignatt --policy-args frames=4 \\
        --host 0.0.0.0 --port 8765 --max-clients 16 --token SECRET

Then open http://127.0.0.1:8765/ (microphone or an audio file; one caption column per language), or
stream from a program with the protocol in ``docs/serving.md`` (``ws://HOST:PORT/ws``).

Each stream is segmented by Silero VAD and translated by the long-form driver
(:mod:`mmst.simultaneous.longform`) with the chosen policy and its sentence restarts (``--sentence-restart``,
``--restart-min-speech-ms``, ``--restart-eos-chunks``: the options and defaults of ``mmst-eval-longform``). The server listens on 127.0.0.1 unless
``--host`` says otherwise. Exit status: 0 on Ctrl-C, 1 with a one-line error for a bad model
(folder or checkpoint), DATA, language or policy, 2 for bad options.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from mmst.cli_help import (
    HelpFormatter,
    add_model_arguments,
    add_restart_arguments,
    add_streaming_policy_arguments,
    add_vad_arguments,
    restart_options,
)

logger = logging.getLogger("mmst.serve")


def build_parser() -> argparse.ArgumentParser:
    """Options of ``mmst-serve``."""
    from .batching import (
        BATCHING_MODES,
        DEFAULT_MIN_GROUP,
        DEFAULT_TICK_MS,
        DEFAULT_TICK_STREAMS,
        MAX_DEFAULT_WORKERS,
    )
    from .limits import DEFAULT_IPV6_PREFIX, DEFAULT_READ_BUFFER_BYTES, DEFAULT_STALL_TIMEOUT_S
    from .protocol import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_RATE

    p = argparse.ArgumentParser(prog="mmst-serve", description=__doc__, formatter_class=HelpFormatter)
    add_model_arguments(p)
    add_streaming_policy_arguments(p)
    p.add_argument("--max-len-b", type=int, default=200, help="maximum tokens written per language and segment")
    p.add_argument("--source-segment-size", type=float, default=320.0,
                   help="ms of audio the long-form driver feeds the translator per step (chunk_ms)")
    add_vad_arguments(p)
    add_restart_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (0.0.0.0 = all; explicit on purpose)")
    p.add_argument("--port", type=int, default=8765, help="TCP port (0 = any free port, printed at start)")
    p.add_argument("--max-clients", type=int, default=8, help="concurrent streams; more are refused (close 1013)")
    p.add_argument("--token", default=None, help="shared secret clients must send for the WebSocket, /stats.json "
                   "and /config.json: the header Authorization: Bearer SECRET (the page sends it as the WebSocket "
                   "subprotocol mmst.bearer.<base64url>; ?token= in the URL is accepted too, but proxies log "
                   "URLs); default: none")
    p.add_argument("--max-clients-per-ip", type=int, default=4,
                   help="streams open at once from one address (loopback exempt; IPv6 counted per --ipv6-prefix "
                   "network); more are refused (close 1013)")
    p.add_argument("--ipv6-prefix", type=int, default=DEFAULT_IPV6_PREFIX,
                   help="--max-clients-per-ip counts IPv6 clients per network of this prefix length (64: one "
                   "site; 128: each address)")
    p.add_argument("--trusted-proxy", default=None, metavar="ADDR",
                   help="address of a reverse proxy: connections from it are counted per the last "
                   "X-Forwarded-For entry (other peers' X-Forwarded-For is ignored)")
    p.add_argument("--allow-origin", action="append", default=[], metavar="URL",
                   help="browser origin allowed to open the WebSocket besides the server's own page, e.g. "
                   "https://translate.example.org behind a reverse proxy (repeatable); other origins get 403")
    p.add_argument("--max-ahead-s", type=float, default=10.0,
                   help="seconds of audio a stream may be ahead of its declared rate: a token bucket of this many "
                   "seconds, refilled at the rate, so credit saved while silent is capped; more closes the "
                   "stream (close 4429)")
    p.add_argument("--max-rate", type=float, default=DEFAULT_MAX_RATE,
                   help="fastest pace a client may declare in its start message (audio seconds per second; "
                   "a file translated faster than real time)")
    p.add_argument("--idle-timeout-s", type=float, default=30.0,
                   help="a stream that sends no audio for this long before its end is closed (close 4410); "
                   "frames count once 20 ms of audio has come (empty frames do not)")
    p.add_argument("--start-timeout-s", type=float, default=10.0,
                   help="a connection that sends no start message this long after its handshake is closed "
                   "(close 4411)")
    p.add_argument("--stall-timeout-s", type=float, default=DEFAULT_STALL_TIMEOUT_S,
                   help="/healthz answers 503 when a tick has been computing (or waiting for a compute thread) "
                   "this long")
    p.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES,
                   help="largest WebSocket message in bytes (close 1009 above)")
    p.add_argument("--read-buffer-bytes", type=int, default=DEFAULT_READ_BUFFER_BYTES,
                   help="received messages one connection may hold unread, in bytes: the server stops reading "
                   "its socket above max(1, this // --max-message-bytes) messages")
    p.add_argument("--send-queue", type=int, default=256,
                   help="events queued for one client before it counts as a slow reader (close 4408)")
    p.add_argument("--batching", choices=BATCHING_MODES, default="tick",
                   help="tick = dynamic batching per tick: the streams with audio waiting are stepped "
                   "together and their Silero VAD windows, front ends (CMVN, conv subsampler), encoder blocks and decoder steps "
                   "are stacked into "
                   "one model call each (padded, masked; same words); off = every audio frame computed on "
                   "its own, every model call alone (the benchmark's baseline)")
    p.add_argument("--save-audio", default=None, metavar="DIR",
                   help="write each stream's received 16 kHz PCM to DIR/<stream id>.wav (float32) for offline "
                   "replays, on disk as it arrives (DIR/<stream id>.wav.part until the stream closes); the "
                   "stream id is a UTC time stamp plus a counter")
    p.add_argument("--tick-ms", type=float, default=DEFAULT_TICK_MS,
                   help="tick batching: shortest interval between two ticks (ms); the frames that arrive "
                   "within it are computed together (more stacking, at most this much added latency; 0 = "
                   "compute as soon as a thread is free)")
    p.add_argument("--tick-streams", type=int, default=DEFAULT_TICK_STREAMS,
                   help="tick batching: a tick starts before --tick-ms is over once this many streams have audio "
                   "waiting (so the wait shrinks as the load grows)")
    p.add_argument("--compute-workers", type=int, default=None,
                   help="compute threads; the streams of a tick are split over them "
                   f"(default: one per two CPU cores, at least 1, at most {MAX_DEFAULT_WORKERS})")
    p.add_argument("--worker-min-streams", type=int, default=DEFAULT_MIN_GROUP,
                   help="fewest streams per compute thread in a tick (a lighter tick runs on fewer threads, so "
                   "its calls stack more)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op CPU threads of each compute thread")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level")
    return p


def _check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("max_clients", "max_clients_per_ip", "send_queue", "max_message_bytes", "threads", "beam",
                 "worker_min_streams", "tick_streams", "read_buffer_bytes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 <= args.ipv6_prefix <= 128:
        p.error("--ipv6-prefix must be in 0..128")
    for name in ("max_ahead_s", "max_rate", "idle_timeout_s", "start_timeout_s", "stall_timeout_s"):
        if not getattr(args, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    bad = [o for o in args.allow_origin if not o.startswith(("http://", "https://"))]
    if bad:
        p.error(f"--allow-origin takes http(s)://host[:port] origins, got {bad[0]!r}")
    if not 0 <= args.port <= 65535:
        p.error("--port must be in 0..65535")
    if args.compute_workers is not None and args.compute_workers < 1:
        p.error("--compute-workers must be >= 1")
    if not args.tick_ms >= 0:
        p.error("--tick-ms must be >= 0")
    if args.source_segment_size <= 0 or args.max_segment_s <= 0:
        p.error("--source-segment-size and --max-segment-s must be > 0")
    try:
        restart_options(args)
    except ValueError as e:
        p.error(str(e))


def make_driver_factory(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """``(DriverPool: make_driver(langs) -> LongFormTranslator, served languages)`` from the options.

    Raises:
        mmst.evaluation.bundle.LoadError: bad checkpoint, DATA or languages.
        ValueError: a bad policy, or a policy sweep (one setting only).
    """
    from mmst.evaluation.bundle import load_bundle
    from mmst.simultaneous.policy_spec import specs_from_args
    from mmst.simultaneous.vad import StreamingVad, load_vad_model

    from .drivers import DriverPool

    langs = [x.strip() for x in args.tgt_langs.split(",") if x.strip()] if args.tgt_langs else None
    bundle = load_bundle(args.model, data_dir=args.data, tgt_langs=langs, device=args.device,
                         quantize=args.quantize)
    swept, specs, per_lang = specs_from_args(args, [args.waitk_lagging])
    if len(specs) != 1:
        raise ValueError(f"mmst-serve runs one policy setting; --policy-args sweeps {swept} over {len(specs)} values")
    served = list(bundle.tgt_langs)
    bad = [lang for lang in per_lang if lang not in served]
    if bad:
        raise ValueError(f"--policy-per-lang names {', '.join(bad)}, not among the served languages {served}")
    policy = {lang: per_lang.get(lang, specs[0]) for lang in served}
    bundle.translator(policy=policy, beam=args.beam, max_len_b=args.max_len_b)  # fail now, not per stream
    vad_model = load_vad_model()  # the bundled weights load (and fail) at start

    vad = {"threshold": args.vad_threshold, "min_silence_ms": args.vad_min_silence_ms,
           "speech_pad_ms": args.vad_speech_pad_ms, "max_segment_s": args.max_segment_s}
    StreamingVad(**vad, model=vad_model)  # out-of-range VAD options fail now
    pool = DriverPool(bundle, policy, beam=args.beam, max_len_b=args.max_len_b, vad=vad,
                      chunk_ms=args.source_segment_size, vad_model=vad_model,
                      max_idle=getattr(args, "max_clients", 8), restart=restart_options(args))
    return pool, served


async def _serve(args: argparse.Namespace, make_driver, langs: list[str]) -> None:
    from .server import ServerConfig, TranslationServer

    cfg = ServerConfig(langs=langs, max_clients=args.max_clients, token=args.token,
                       max_message_bytes=args.max_message_bytes, send_queue=args.send_queue,
                       save_audio_dir=Path(args.save_audio) if args.save_audio else None, batching=args.batching,
                       max_ahead_s=args.max_ahead_s, max_rate=args.max_rate, idle_timeout_s=args.idle_timeout_s,
                       max_clients_per_ip=args.max_clients_per_ip, trusted_proxy=args.trusted_proxy,
                       start_timeout_s=args.start_timeout_s, ipv6_prefix=args.ipv6_prefix,
                       read_buffer_bytes=args.read_buffer_bytes, stall_timeout_s=args.stall_timeout_s,
                       allow_origins=list(args.allow_origin),
                       max_step_samples=max(1, int(round(args.source_segment_size * 16))),
                       compute_workers=args.compute_workers, tick_ms=args.tick_ms,
                       worker_min_streams=args.worker_min_streams, tick_streams=args.tick_streams,
                       info={"checkpoint": Path(args.model).name})
    server = TranslationServer(make_driver, cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with server.running(args.host, args.port) as srv:
        port = srv.sockets[0].getsockname()[1]
        host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
        # one machine-readable line first (tests and the benchmark read the port from it)
        print(f"mmst-serve: listening on http://{host}:{port}/ (WebSocket ws://{host}:{port}/ws; "
              f"languages {','.join(langs)}; batching {args.batching}; "
              f"{server.scheduler.workers} compute thread(s))", flush=True)
        await stop.wait()
    logger.info("stopped: %s", server.stats())


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mmst-serve``; returns the exit status."""
    p = build_parser()
    args = p.parse_args(argv)
    _check_args(p, args)
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(levelname)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("websockets").setLevel(logging.WARNING)
    import torch

    from mmst.evaluation.bundle import LoadError

    torch.set_num_threads(args.threads)
    try:
        make_driver, langs = make_driver_factory(args)
    except (LoadError, ValueError) as e:
        print(f"mmst-serve: error: {e}", file=sys.stderr)
        return 1
    try:
        asyncio.run(_serve(args, make_driver, langs))
    except OSError as e:  # port in use, bad host
        print(f"mmst-serve: error: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
