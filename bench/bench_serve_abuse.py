#!/usr/bin/env python
"""mmst-serve against abusive clients: what each costs the server and a real-time client next to it.

Starts ``python -m mmst.serve`` once, streams one talk at real-time speed (100 ms int16 frames) alone,
then once next to each abusive client:

- ``idle_credit_burst``: declares the fastest pace (``rate`` = ``--max-rate``), stays silent 3 s (less
  than ``--idle-timeout-s``; 30 s of pace credit without the cap), then sends 0.5 s float32 frames as
  fast as it can;
- ``one_sample_frames``: one-sample int16 frames, as fast as it can;
- ``empty_frame_idler``: an empty frame every second and nothing else;
- ``never_reading``: streams a talk at the fastest pace and never reads its socket;
- ``prestart_sockets``: 8 connections that never send ``start``.

Per row: how the server ended the abuser (close code, seconds after its first message), the server's RSS
growth (peak during the row minus its RSS before it, MiB, sampled every 0.1 s), and the real-time
client's words (they must equal its words alone) and client-measured latency p50 / p95 (ms, from the
moment the audio the word needed had been spoken to receiving the word, ``mmst.serve.client.ClientLatency``).

Summary: ``abuse_rss_growth_mib_max``, ``abuse_realtime_client_p95_ms_max`` and
``abuse_realtime_words_exact`` (every row); ``goals`` records each target (:data:`GOALS`). Writes
``docs/results/serve_abuse.json`` (with provenance) and prints the Markdown table.

Usage::

    python bench/bench_serve_abuse.py --model exp/synthetic/model/checkpoint_best.pt --data exp/synthetic/data
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from bench_serve import REPO, Server, talk_wavs
from provenance import RESULTS_DIR, finish_record, run_record

from mmst.cli_help import ArgumentParser, add_model_arguments
from mmst.serve.client import encode_audio, stream_audio
from mmst.serve.protocol import DEFAULT_MAX_RATE

DEPENDS_ON = ("bench/bench_serve_abuse.py", "bench/bench_serve.py", "mmst/serve/", "mmst/simultaneous/",
              "mmst/models/", "mmst/evaluation/", "mmst/features.py")
#: targets on 2 cores with the quickstart xs model: summary key -> (comparison, value)
GOALS = {"abuse_rss_growth_mib_max": ("<=", 64.0), "abuse_realtime_client_p95_ms_max": ("<", 500.0)}
ABUSERS = ("idle_credit_burst", "one_sample_frames", "empty_frame_idler", "never_reading", "prestart_sockets")


def build_parser() -> argparse.ArgumentParser:
    """Options of the benchmark."""
    p = ArgumentParser(description=__doc__)
    add_model_arguments(p, data_required=True, langs_default=None)
    p.add_argument("--wav", default=None, help="the talk the real-time client streams (default: the first "
                   "tst-COMMON talk named by DATA/tst-COMMON.tsv)")
    p.add_argument("--seconds", type=float, default=15.0, help="audio of the real-time client (the talk cut to this)")
    p.add_argument("--idle-timeout-s", type=float, default=5.0, help="the server's --idle-timeout-s")
    p.add_argument("--start-timeout-s", type=float, default=5.0, help="the server's --start-timeout-s")
    p.add_argument("--out", default=str(RESULTS_DIR / "serve_abuse.json"), help="output JSON")
    p.add_argument("--note", default="", help="free text stored with the results (e.g. 'shared machine')")
    return p


async def _ended(ws) -> None:
    """Read (and drop) until the server closes ``ws``."""
    try:
        async for _ in ws:
            pass
    except Exception:  # noqa: BLE001 - closed abnormally
        pass


async def abuse(kind: str, url: str, talk: np.ndarray, info: dict, out=None) -> None:
    """Run one abusive client until the server closes it (or this task is cancelled); ``info`` gets its
    close code and reason, the seconds from its first message to the close, and what it sent; ``out``
    (a queue) gets its stream id as soon as the server names it."""
    from websockets.asyncio.client import connect

    socks = []
    t0 = time.monotonic()
    try:
        if kind == "prestart_sockets":
            socks = [await connect(url) for _ in range(8)]
            await asyncio.gather(*(_ended(s) for s in socks))
            info.update(close_code=sorted({s.close_code for s in socks}), open_s=round(time.monotonic() - t0, 2))
            return
        ws = await connect(url, max_size=None, max_queue=1 if kind == "never_reading" else 16)
        socks = [ws]
        fmt = "float32" if kind == "idle_credit_burst" else "int16"
        rate = DEFAULT_MAX_RATE if kind in ("idle_credit_burst", "never_reading") else 1.0
        await ws.send(json.dumps({"type": "start", "sample_format": fmt, "rate": rate}))
        stream = json.loads(await ws.recv()).get("stream")
        if out is not None:
            out.put({"stream": stream})
        t0 = time.monotonic()
        reader = None if kind == "never_reading" else asyncio.ensure_future(_ended(ws))
        sent_s = 0.0
        try:
            if kind == "idle_credit_burst":
                await asyncio.sleep(3.0)
                frame = encode_audio(np.zeros(8000, np.float32), fmt)
                while True:
                    await ws.send(frame)
                    sent_s += 0.5
            elif kind == "one_sample_frames":
                frame = encode_audio(np.zeros(1, np.float32), fmt)
                while True:
                    for _ in range(100):
                        await ws.send(frame)
                    sent_s += 100 / 16000
                    await asyncio.sleep(0)
            elif kind == "empty_frame_idler":
                while True:
                    await ws.send(b"")
                    await asyncio.sleep(1.0)
            elif kind == "never_reading":
                for i in range(0, len(talk), 1600):
                    await ws.send(encode_audio(talk[i:i + 1600], fmt))
                    sent_s += 0.1
                    await asyncio.sleep(0.1 / rate)
                await asyncio.sleep(3600)
        except Exception:  # noqa: BLE001 - the server closed it
            pass
        if reader is not None:
            await reader
        else:
            await ws.wait_closed()
        info.update(close_code=ws.close_code, close_reason=ws.close_reason, open_s=round(time.monotonic() - t0, 2),
                    audio_sent_s=round(sent_s, 3))
    finally:
        for s in socks:
            s.transport.abort()


def _abuser_process(kind: str, url: str, talk: np.ndarray, out) -> None:
    """Child process: run the abuser on its own event loop and CPU share; its info goes to ``out``."""
    info: dict = {}
    asyncio.run(abuse(kind, url, talk, info, out))
    out.put(info)


def server_close(log: Path, stream: str | None) -> int | None:
    """The close code the server logged for ``stream`` (``<id>: closed (CODE)`` / ``closing (CODE)``)."""
    if not stream:
        return None
    m = re.search(re.escape(stream) + r": clos(?:ed|ing) \((\d+)\)", log.read_text(errors="replace"))
    return int(m.group(1)) if m else None


def row(url: str, talk: np.ndarray, kind: str | None) -> tuple[dict, list]:
    """The real-time client streaming ``talk`` (next to the abuser ``kind``, in its own process so that
    its flood does not slow the client's own event loop); its summary and words."""
    import multiprocessing

    info: dict = {}
    proc = None
    if kind:
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        proc = ctx.Process(target=_abuser_process, args=(kind, url, talk, q), daemon=True)
        proc.start()
        time.sleep(0.5)
    res = asyncio.run(stream_audio(url, talk, 16000, realtime=True))
    if proc is not None:
        proc.join(12.0)  # a client that does not read sees the close after websockets' close timeout (10 s)
        if proc.is_alive():
            info["still_open_at_end"] = True
            proc.terminate()
            proc.join()
        while True:
            try:
                info.update(q.get(timeout=0.5))
            except queue.Empty:
                break
    lags = np.asarray(res.lags_ms, dtype=np.float64)
    words = [(w["lang"], w["text"], w["segment"], w["start_ms"]) for w in res.words]
    out = {"realtime_close_code": res.close_code, "realtime_words": len(words),
           "realtime_client_p50_ms": round(float(np.percentile(lags, 50)), 1) if lags.size else None,
           "realtime_client_p95_ms": round(float(np.percentile(lags, 95)), 1) if lags.size else None,
           "abuser": info}
    return out, words


def goals(summary: dict) -> dict:
    """``{key: {"target", "value", "met"}}`` for every key of :data:`GOALS`."""
    ops = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b}
    return {k: {"target": f"{op} {t:g}", "value": summary.get(k),
                "met": bool(summary.get(k) is not None and ops[op](summary[k], t))} for k, (op, t) in GOALS.items()}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 1 when the talk is missing or the real-time client was not served."""
    args = build_parser().parse_args(argv)
    record = run_record(depends_on=DEPENDS_ON)
    wav = Path(args.wav) if args.wav else next(iter(talk_wavs(Path(args.data))), None)
    if wav is None:
        print("bench_serve_abuse: no talk wav found (pass --wav)", file=sys.stderr)
        return 1
    x, sr = sf.read(wav, dtype="float32", always_2d=True)
    if sr != 16000:
        import soxr

        x = soxr.resample(x, sr, 16000)
    talk = np.ascontiguousarray(x.mean(axis=1)[: int(args.seconds * 16000)], dtype=np.float32)
    server_args = ["--model", args.model, "--data", args.data, "--quantize", args.quantize, "--max-clients", "16",
                   "--idle-timeout-s", f"{args.idle_timeout_s:g}", "--start-timeout-s", f"{args.start_timeout_s:g}"]
    log = Path(tempfile.mkdtemp(prefix="bench_serve_abuse_")) / "server.log"
    server = Server(server_args, log)
    url = f"ws://127.0.0.1:{server.port}/ws"
    rows: dict[str, dict] = {}
    try:
        asyncio.run(stream_audio(url, talk[:16000], 16000, realtime=False))  # a warm driver
        alone_words = None
        for kind in (None, *ABUSERS):
            name = kind or "alone"
            print(f"{name} ...", file=sys.stderr, flush=True)
            rss0 = server.ps.memory_info().rss / 2**20
            server.reset_peak()
            out, words = row(url, talk, kind)
            if kind:
                out["abuser"]["server_close_code"] = server_close(log, out["abuser"].get("stream"))
            if alone_words is None:
                alone_words = words
            out.update(rss_before_mib=round(rss0, 1), rss_growth_mib=round(server.peak_rss_mib - rss0, 1),
                       realtime_words_exact=words == alone_words, loadavg_1m=os.getloadavg()[0])
            rows[name] = out
    finally:
        server.stop()
    if not alone_words or rows["alone"]["realtime_close_code"] != 1000:
        print(f"bench_serve_abuse: the real-time client was not served alone; see {log}", file=sys.stderr)
        return 1
    abused = [rows[k] for k in ABUSERS]
    summary = {"abuse_rss_growth_mib_max": max(r["rss_growth_mib"] for r in abused),
               "abuse_realtime_client_p95_ms_max": max(r["realtime_client_p95_ms"] or float("inf") for r in abused),
               "abuse_realtime_words_exact": all(r["realtime_words_exact"] for r in abused),
               "alone_realtime_client_p95_ms": rows["alone"]["realtime_client_p95_ms"]}
    res = {"summary": summary, "goals": goals(summary), "rows": rows,
           "config": {"seconds": args.seconds, "server_args": server_args[4:], "cpus": os.cpu_count(),
                      "note": args.note},
           "provenance": finish_record(record)}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    sys.path.insert(0, str(REPO / "tools"))
    from render_docs import serve_abuse_table

    print(serve_abuse_table(res))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
