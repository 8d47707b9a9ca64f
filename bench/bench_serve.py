#!/usr/bin/env python
"""mmst-serve under load: 1 to 32 simulated real-time clients on loopback, cross-stream batching on and
off, and a flooding client next to 8 real-time ones.

Starts ``python -m mmst.serve`` (one server per batching mode), then, for each N, N clients that each
stream a different talk of ``DATA/../raw`` (or ``--wav`` files) at real-time speed in 100 ms int16
frames, all at once. The flood row (tick batching): ``--flood-clients`` such clients plus one flooder that
declares the server's fastest pace (``rate`` = ``--max-rate``) and sends as fast as the server accepts
(half ``--max-ahead-s`` ahead of that pace), for as long as the real-time clients stream. The clients run
in this process, on the same machine as the server: their CPU (``clients_cpu_s``, recorded per row) is
taken from the same cores. Reports, per N:

- added latency p50 / p95 (ms; server receive of the frame after which a word could be written ->
  server send of the word; over all words of all clients);
- RTF per client (server compute seconds on that stream / its audio seconds; max over clients);
- server CPU (process CPU seconds / wall seconds, %), CPU seconds per second of audio, peak RSS (MiB);
- words per second (all clients);
- streams per model call (tick mode): stream requests served per stacked call, per kind of call (Silero
  VAD window, front end, encoder block, decoder step; from the server's ``/stats.json``; 1.0 = nothing
  stacked).

Summary (the first key of the JSON): ``p95_added_latency_ms_8_clients``,
``batched_over_unbatched_cost_8_clients`` and ``batched_over_unbatched_cost_16_clients`` (server CPU
seconds per second of audio at 8 / 16 clients, tick batching / ``--batching off``; with ``--cost-reps R``
the median over R pairs of runs that alternate between a tick and an unbatched server, both started
once and kept running, so a drift of the machine's speed between the two servers' rows cancels; the
pairs are in ``cost_pairs``),
``max_realtime_clients`` (the largest N whose clients all have RTF < 1 and whose p95 added latency is
< 300 ms; 0 when none), ``max_realtime_clients_client_p95`` (the same with the p95 of the latency the
clients measure, from sending a frame to receiving the word: ``client_latency_ms_p50/p95`` per row) and ``flood_p95_added_latency_ms`` (p95 added latency of the real-time clients of
the flood row). ``goals`` records each target (:data:`GOALS`) and whether it was met.

Writes ``docs/results/serve.json`` (with provenance) and prints the Markdown table. The machine's load
average during the run is recorded: numbers from a shared machine are pessimistic.

Usage::

    nice -n 5 python bench/bench_serve.py --model exp/synthetic/model/checkpoint_best.pt \\
        --data exp/synthetic/data
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import soundfile as sf
from provenance import RESULTS_DIR, finish_record, run_record

from mmst.cli_help import ArgumentParser, add_model_arguments
from mmst.serve.loadtest import run_clients, summarize_clients
from mmst.serve.protocol import DEFAULT_MAX_RATE

#: The paths this benchmark uses: the script, and the server's code and page (the server process is stopped with
#: SIGTERM, so it cannot record its own imports); the modules the script imports are recorded at run time.
DEPENDS_ON = (
    "bench/bench_serve.py",
    "mmst/serve/",
    "mmst/simultaneous/",
    "mmst/models/",
    "mmst/evaluation/",
    "mmst/features.py",
)

REPO = Path(__file__).resolve().parents[1]
RT_P95_MS = 300.0
#: targets on 2 cores with the quickstart xs model: summary key -> (comparison, value)
GOALS = {"max_realtime_clients": (">=", 16), "batched_over_unbatched_cost_8_clients": ("<=", 0.7),
         "flood_p95_added_latency_ms": ("<", 300.0)}


def build_parser() -> argparse.ArgumentParser:
    """Options of the benchmark."""
    p = ArgumentParser(description=__doc__)
    add_model_arguments(p, data_required=True, langs_default=None)
    p.add_argument("--wav", nargs="*", default=None,
                   help="talk wavs to stream (default: the tst-COMMON talks named by DATA/tst-COMMON.tsv)")
    p.add_argument("--clients", default="1,4,8,16,24,32", help="numbers of concurrent clients")
    p.add_argument("--unbatched-clients", default="8,16",
                   help="numbers of clients of the runs with --batching off (comma list; empty = skip)")
    p.add_argument("--flood-clients", type=int, default=8,
                   help="real-time clients of the flood row, next to one flooder (0 = skip)")
    p.add_argument("--one-thread-clients", default="16",
                   help="numbers of clients of tick runs on ONE compute thread (--compute-workers 1), to compare "
                   "with the default threads (comma list; empty = skip)")
    p.add_argument("--cost-reps", type=int, default=3,
                   help="paired tick / unbatched runs at each --unbatched-clients N for the cost ratios (median; 0 = "
                        "the ratio of the two single rows)")
    p.add_argument("--seconds", type=float, default=20.0, help="audio per client (talks cut to this length)")
    p.add_argument("--server-args", default="", help="extra mmst-serve options, e.g. '--policy alignatt'")
    p.add_argument("--out", default=str(RESULTS_DIR / "serve.json"), help="output JSON")
    p.add_argument("--note", default="", help="free text stored with the results (e.g. 'shared machine')")
    return p


def talk_wavs(data: Path) -> list[Path]:
    """Distinct talk wavs referenced by ``DATA/tst-COMMON.tsv`` (column ``wav``)."""
    import csv

    with open(data / "tst-COMMON.tsv", newline="") as f:
        wavs = list(dict.fromkeys(row["wav"] for row in csv.DictReader(f, delimiter="\t") if row.get("wav")))
    return [Path(w) for w in wavs if Path(w).is_file()]


class Server:
    """``python -m mmst.serve`` in a subprocess, with CPU and peak-RSS sampling (psutil)."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "mmst.serve", *args, "--port", "0"], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://[^:]+:(\d+)/", line)
        if not m:
            raise RuntimeError(f"mmst-serve did not start: {line!r}; see {log}")
        self.port = int(m.group(1))
        self.ps = psutil.Process(self.proc.pid)
        self._peak = 0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self._peak = max(self._peak, self.ps.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.1)

    def reset_peak(self) -> None:
        self._peak = self.ps.memory_info().rss

    @property
    def peak_rss_mib(self) -> float:
        return self._peak / 2**20

    def cpu_s(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def server_stats(port: int) -> dict:
    """The server's ``/stats.json``."""
    from urllib.request import urlopen

    with urlopen(f"http://127.0.0.1:{port}/stats.json", timeout=10) as r:
        return json.loads(r.read())


def stacked_counts(port: int) -> dict:
    """The server's ``/stats.json`` ``stacked`` counters: ``{kind: {"calls", "requests"}}``."""
    return server_stats(port)["stacked"]


def streams_per_call(before: dict, after: dict) -> dict:
    """Stream requests served per model call, per kind, between two :func:`stacked_counts` (1.0 = nothing
    was stacked)."""
    out = {}
    for kind, c in after.items():
        b = before.get(kind, {"calls": 0, "requests": 0})
        calls = c["calls"] - b["calls"]
        out[kind] = (c["requests"] - b["requests"]) / calls if calls else None
    return out


def measure(server: Server, audios: list[np.ndarray], flood: np.ndarray | None = None) -> dict:
    """One load point: warm the driver pool, then stream every audio at once in real time (and, with
    ``flood``, one more client sending ``flood`` as fast as the server accepts until they are done)."""
    url = f"ws://127.0.0.1:{server.port}/ws"
    warm = [a[:16000] for a in audios] + ([flood[:16000]] if flood is not None else [])
    asyncio.run(run_clients(url, warm, realtime=False))  # one driver per client, warm
    server.reset_peak()
    stacked0 = stacked_counts(server.port)
    cpu0, load0, own0 = server.cpu_s(), os.getloadavg()[0], time.process_time()
    flooder: dict = {}
    if flood is None:
        results, wall = asyncio.run(run_clients(url, audios, realtime=True, stagger_ms=37.0))
    else:
        results, wall = asyncio.run(_with_flooder(url, audios, flood, flooder))
    cpu = server.cpu_s() - cpu0
    row = summarize_clients(results, wall)
    row.update(server_cpu_s=cpu, server_cpu_pct=100.0 * cpu / wall,
               cpu_s_per_audio_s=cpu / row["audio_s"] if row["audio_s"] else None,
               clients_cpu_s=time.process_time() - own0, compute_workers=server_stats(server.port)["compute_workers"],
               peak_rss_mib=server.peak_rss_mib, loadavg_1m=[load0, os.getloadavg()[0]],
               streams_per_call=streams_per_call(stacked0, stacked_counts(server.port)))
    if flood is not None:
        row["flooder"] = flooder
    row["realtime"] = bool(row["failed"] == 0 and row["rtf_max"] is not None and row["rtf_max"] < 1.0
                           and row["added_latency_ms_p95"] is not None and row["added_latency_ms_p95"] < RT_P95_MS)
    return row


async def _with_flooder(url: str, audios: list[np.ndarray], flood: np.ndarray, info: dict):
    """The real-time clients of ``audios`` while one flooder streams ``flood`` at the server's fastest
    declared pace; the flooder is disconnected when they are done. ``info`` gets the flooder's pace,
    the audio it offered and, if it ended first, how."""
    from mmst.serve.client import stream_audio

    task = asyncio.ensure_future(stream_audio(url, flood, 16000, realtime=False, rate=DEFAULT_MAX_RATE))
    await asyncio.sleep(1.0)  # the flooder is ahead when the others start
    results, wall = await run_clients(url, audios, realtime=True, stagger_ms=37.0)
    info.update(rate=DEFAULT_MAX_RATE, audio_offered_s=len(flood) / 16000.0, ended_first=task.done())
    if task.done():
        r = task.result()
        info.update(close_code=r.close_code, close_reason=r.close_reason)
    else:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
    return results, wall


def goals(summary: dict) -> dict:
    """``{key: {"target": "<op> value", "value", "met"}}`` for every key of :data:`GOALS` (met False when
    the value is missing)."""
    ops = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b}
    out = {}
    for key, (op, target) in GOALS.items():
        v = summary.get(key)
        out[key] = {"target": f"{op} {target:g}", "value": v, "met": bool(v is not None and ops[op](v, target))}
    return out


def table(res: dict) -> str:
    """Markdown table of the rows (the same function renders it in the docs)."""
    sys.path.insert(0, str(REPO / "tools"))
    from render_docs import serve_table

    return serve_table(res)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 1 with a message when the server or the audio is missing."""
    args = build_parser().parse_args(argv)
    record = run_record(depends_on=DEPENDS_ON)
    wavs = [Path(w) for w in args.wav] if args.wav else talk_wavs(Path(args.data))
    if not wavs:
        print("bench_serve: no talk wavs found (pass --wav)", file=sys.stderr)
        return 1
    talks = []
    for w in wavs:
        x, sr = sf.read(w, dtype="float32", always_2d=True)
        if sr != 16000:
            import soxr

            x = soxr.resample(x, sr, 16000)
        talks.append(np.ascontiguousarray(x.mean(axis=1)[: int(args.seconds * 16000)], dtype=np.float32))
    ns = [int(n) for n in args.clients.split(",") if n.strip()]
    ns_off = [int(n) for n in args.unbatched_clients.split(",") if n.strip()]
    n_max = max(ns + ns_off + [args.flood_clients + 1])
    base = ["--model", args.model, "--data", args.data, "--max-clients", str(n_max),
            *args.server_args.split(), "--quantize", args.quantize]
    rows: dict[str, dict] = {}
    log_dir = Path(tempfile.mkdtemp(prefix="bench_serve_"))
    print(f"server logs in {log_dir}", file=sys.stderr)
    ns_one = [int(n) for n in args.one_thread_clients.split(",") if n.strip()]
    modes = [("tick", ns, [])] + ([("off", ns_off, [])] if ns_off else []) + \
        ([("tick", ns_one, ["--compute-workers", "1"])] if ns_one else [])
    for mode, counts, extra in modes:
        key = mode + ("-1thread" if extra else "")
        server = Server([*base, "--batching", mode, *extra], log_dir / f"server_{key}.log")
        try:
            for n in counts:
                audios = [talks[i % len(talks)] for i in range(n)]
                print(f"batching {mode} {' '.join(extra)}: {n} client(s) ...", file=sys.stderr, flush=True)
                rows[f"{key}/{n}"] = {"batching": mode, "n": n, **measure(server, audios)}
            if mode == "tick" and not extra and args.flood_clients:
                n = args.flood_clients
                audios = [talks[i % len(talks)] for i in range(n)]
                need = int((args.seconds + 5) * DEFAULT_MAX_RATE * 16000)  # enough for the whole row at the fastest pace
                flood = np.tile(np.concatenate(talks), -(-need // sum(map(len, talks))))[:need]
                print(f"batching {mode}: {n} client(s) + 1 flooder ...", file=sys.stderr, flush=True)
                rows[f"flood/{n}"] = {"batching": "tick", "n": n, "flood": True, **measure(server, audios, flood)}
        finally:
            server.stop()

    pairs: dict[str, list[dict]] = {}
    if args.cost_reps > 0 and ns_off:
        servers = {mode: Server([*base, "--batching", mode], log_dir / f"server_pairs_{mode}.log")
                   for mode in ("tick", "off")}
        try:
            for r in range(args.cost_reps):
                for n in ns_off:
                    audios = [talks[i % len(talks)] for i in range(n)]
                    order = ("tick", "off") if r % 2 == 0 else ("off", "tick")  # alternate which runs first
                    cost = {}
                    for mode in order:
                        print(f"cost pair {r + 1}/{args.cost_reps}: {mode}, {n} client(s) ...", file=sys.stderr,
                              flush=True)
                        cost[mode] = measure(servers[mode], audios)["cpu_s_per_audio_s"]
                    pairs.setdefault(str(n), []).append({**cost, "ratio": cost["tick"] / cost["off"]})
        finally:
            for server in servers.values():
                server.stop()

    def cost_ratio(n: int) -> float | None:
        if pairs.get(str(n)):
            return statistics.median(p["ratio"] for p in pairs[str(n)])
        tick, off = rows.get(f"tick/{n}"), rows.get(f"off/{n}")
        return tick["cpu_s_per_audio_s"] / off["cpu_s_per_audio_s"] if tick and off and off["cpu_s_per_audio_s"] else None

    tick8 = rows.get("tick/8")
    flood_row = rows.get(f"flood/{args.flood_clients}")
    realtime = [int(k.split("/")[1]) for k, r in rows.items() if k.startswith("tick/") and r["realtime"]]
    realtime_client = [int(k.split("/")[1]) for k, r in rows.items() if k.startswith("tick/") and r["failed"] == 0
                       and r["rtf_max"] is not None and r["rtf_max"] < 1.0
                       and r.get("client_latency_ms_p95") is not None and r["client_latency_ms_p95"] < RT_P95_MS]
    summary = {"p95_added_latency_ms_8_clients": tick8["added_latency_ms_p95"] if tick8 else None,
               "batched_over_unbatched_cost_8_clients": cost_ratio(8),
               "max_realtime_clients": max(realtime) if realtime else 0,
               "max_realtime_clients_client_p95": max(realtime_client) if realtime_client else 0,
               "batched_over_unbatched_cost_16_clients": cost_ratio(16),
               "flood_p95_added_latency_ms": flood_row["added_latency_ms_p95"] if flood_row else None}
    res = {
        "summary": summary,
        "goals": goals(summary),
        "rows": rows,
        "cost_pairs": pairs,
        "config": {"checkpoint": args.model, "data": args.data, "quantize": args.quantize,
                   "seconds_per_client": args.seconds,
                   "talks": [str(w) for w in wavs], "frame_ms": 100, "sample_format": "int16",
                   "server_args": base[4:], "realtime_p95_ms": RT_P95_MS, "cpus": os.cpu_count(),
                   "flood_clients": args.flood_clients, "cost_reps": args.cost_reps, "note": args.note},
        "provenance": finish_record(record),
    }
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(table(res))
    print(json.dumps(res["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
