#!/usr/bin/env python
"""mmst-serve under load: 1 to 32 simulated real-time clients on loopback, cross-stream batching on and
off, and a flooding client next to 8 real-time ones, each load point run ``--reps`` times, with the latency
the clients measure.

Starts ``python -m mmst.serve`` once per configuration (tick batching; ``--batching off``; tick batching on
``--compare-workers`` compute threads instead of the default) and keeps the servers running. Each repetition then runs every load point once: for
each N, N clients that each stream a different talk of ``DATA/tst-COMMON.tsv`` (or ``--wav`` files) at
real-time speed in 100 ms int16 frames, all at once, against the tick server, and at the
``--unbatched-clients`` points right before or after against the unbatched one (the order alternates
between repetitions), so each pair of runs sees the same machine and the cost ratio of the pair cancels a
drift of its speed. The repetitions are interleaved (all points of repetition 1, then of 2, ...), so a slow
spell of the machine spreads over the points instead of spoiling one. The flood row (tick batching):
``--flood-clients`` such clients plus one flooder that declares the server's fastest pace (``rate`` =
``--max-rate``) and sends as fast as the server accepts, for as long as the real-time clients stream. The
clients run in this process, on the same machine as the server: their CPU (``clients_cpu_s``) is taken from
the same cores. Reports, per load point (the median over the repetitions, and the min-max of the p95s and of
the cost ratio):

- client latency p50 / p95 (ms; measured by each client: from the moment the audio a word needed had been
  spoken, i.e. the frame whose end reaches the word's ``start_ms`` was due at real-time pace, to the client
  receiving the word, :class:`mmst.serve.client.ClientLatency`; over all words of all clients of a run);
- added latency p50 / p95 (ms; the server's own figure in the same run: server receive of the frame after
  which a word could be written -> server send of the word);
- the clients' send lateness p95 (ms after a frame's due time; the clients' own share of their latency);
- RTF per client (server compute seconds on that stream / its audio seconds; max over clients and runs);
- server CPU (process CPU seconds / wall seconds, %), CPU seconds per second of audio, peak RSS (MiB);
- words per second (all clients);
- streams per call (tick mode): stream requests served per stacked call, per kind of call (Silero VAD
  window, front end, encoder block, decoder step; from the server's ``/stats.json``; 1.0 = nothing stacked).

Summary (the first key of the JSON), each key with its goal and whether it was met (``summary.goals``,
:data:`GOALS`): ``max_realtime_clients_client_p95`` (the largest N such that at every measured N' <= N no
client failed, every client's RTF < 1, and the median over the repetitions of the client-measured p95 is
< 300 ms; :func:`mmst.serve.loadtest.max_realtime_clients`), ``batched_over_unbatched_cost_8_clients``
(server CPU seconds per second of audio at 8 clients, tick batching / ``--batching off``, the median of the
paired repetitions), ``flood_client_p95_ms`` (the real-time clients of the flood row, median over the
repetitions), and ``abuse_rss_growth_mib_max`` and ``abuse_realtime_client_p95_ms_max``: the summary of
``bench/bench_serve_abuse.py`` read from ``--abuse-results`` (that bench's rows are not rerun here; the
JSON's command, date, commit, and whether the code it measured has changed since, are recorded under
``abuse_results``, and the file is a dependency of this result, so a newer abuse run makes this one stale).
Also, without goals: ``max_realtime_clients_added_p95`` (the same rule with the server's added latency),
``p95_added_latency_ms_8_clients``, ``client_p95_ms_8_clients``, ``batched_over_unbatched_cost_16_clients``,
``flood_p95_added_latency_ms``, ``abuse_realtime_words_exact``.

Writes ``docs/results/serve.json`` (with provenance) and prints the Markdown table. The machine's load
average during each run is recorded: numbers from a shared machine are pessimistic. Run
``bench/bench_serve_abuse.py`` first: its JSON is read at the start.

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
from mmst.provenance import changed_dependencies
from mmst.serve.loadtest import max_realtime_clients, repeated_point, run_clients, spread, summarize_clients
from mmst.serve.protocol import DEFAULT_MAX_RATE

#: The paths this benchmark uses: the script, and the server's code and page (the server process is stopped with
#: SIGTERM, so it cannot record its own imports); the modules the script imports are recorded at run time, and
#: the abuse results it folds in (``--abuse-results``) are added when they lie in the repository.
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
GOALS = {"max_realtime_clients_client_p95": (">=", 16), "abuse_rss_growth_mib_max": ("<=", 64.0),
         "abuse_realtime_client_p95_ms_max": ("<", 500.0), "batched_over_unbatched_cost_8_clients": ("<=", 0.7),
         "flood_client_p95_ms": ("<", 300.0)}
#: the summary keys of ``bench/bench_serve_abuse.py`` folded into this one's
ABUSE_KEYS = ("abuse_rss_growth_mib_max", "abuse_realtime_client_p95_ms_max", "abuse_realtime_words_exact")


def build_parser() -> argparse.ArgumentParser:
    """Options of the benchmark."""
    p = ArgumentParser(description=__doc__)
    add_model_arguments(p, data_required=True, langs_default=None)
    p.add_argument("--wav", nargs="*", default=None,
                   help="talk wavs to stream (default: the tst-COMMON talks named by DATA/tst-COMMON.tsv)")
    p.add_argument("--clients", default="1,4,8,16,24,32", help="numbers of concurrent clients (tick batching)")
    p.add_argument("--unbatched-clients", default="8,16",
                   help="numbers of clients of the runs with --batching off, each paired with a tick run of the same "
                        "number in every repetition for the cost ratio (comma list; empty = skip)")
    p.add_argument("--flood-clients", type=int, default=8,
                   help="real-time clients of the flood row, next to one flooder (0 = skip)")
    p.add_argument("--compare-workers", type=int, default=2,
                   help="compute threads (--compute-workers) of the comparison runs, next to the server's default")
    p.add_argument("--compare-workers-clients", default="16,32",
                   help="numbers of clients of tick runs on --compare-workers compute threads (comma list; empty = "
                   "skip)")
    p.add_argument("--reps", type=int, default=3,
                   help="runs of every load point (interleaved: every point once, then again); the table gives "
                        "their median and the min-max of the p95s and of the cost ratios")
    p.add_deprecated_alias("--cost-reps", "--reps")
    p.add_argument("--seconds", type=float, default=15.0, help="audio per client (talks cut to this length)")
    p.add_argument("--abuse-results", default=str(RESULTS_DIR / "serve_abuse.json"),
                   help="results JSON of bench/bench_serve_abuse.py whose summary is folded into this one's "
                        "(read at the start; empty = leave the abuse keys unmeasured)")
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
        self.warm_clients = 0  # drivers built so far (the server keeps them for reuse)
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
    """One run of a load point: the first time the server sees this many clients, warm its driver pool
    (one driver per client, 1 s of audio each, not measured); then stream every audio at once in real time
    (and, with ``flood``, one more client sending ``flood`` as fast as the server accepts until they are
    done). Returns :func:`~mmst.serve.loadtest.summarize_clients`'s row with the server's side."""
    url = f"ws://127.0.0.1:{server.port}/ws"
    n_conn = len(audios) + (flood is not None)
    if n_conn > server.warm_clients:
        warm = [a[:16000] for a in audios] + ([flood[:16000]] if flood is not None else [])
        asyncio.run(run_clients(url, warm, realtime=False))
        server.warm_clients = n_conn
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


def abuse_results(path: Path) -> tuple[dict, dict]:
    """The summary keys of ``bench/bench_serve_abuse.py`` (:data:`ABUSE_KEYS`) from its results JSON ``path``,
    and where they come from: ``{"file", "command", "date", "git_commit", "changed_since"}``, the last the
    files it measured whose code differs now (``[]``: current; ``None``: the JSON records no dependencies).

    Raises:
        ValueError: the file cannot be read, or its summary lacks a key (message names the file and key).
    """
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read the abuse results: {e}") from e
    summary = d.get("summary") if isinstance(d, dict) else None
    missing = [k for k in ABUSE_KEYS if not isinstance(summary, dict) or k not in summary]
    if missing:
        raise ValueError(f"{path}: summary lacks {', '.join(missing)} (written by bench/bench_serve_abuse.py?)")
    prov = d.get("provenance") or {}
    rel = path.resolve().relative_to(REPO).as_posix() if path.resolve().is_relative_to(REPO) else str(path)
    source = {"file": rel, "command": prov.get("command"), "date": prov.get("date"),
              "git_commit": prov.get("git_commit"), "changed_since": changed_dependencies(prov.get("depends_on"))}
    return {k: summary[k] for k in ABUSE_KEYS}, source


def goals(summary: dict) -> dict:
    """``{key: {"goal": "<op> value", "met"}}`` for every key of :data:`GOALS` (``met`` None when the value
    was not measured), as ``docs/results/continuous.json`` records them."""
    ops = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b}
    out = {}
    for key, (op, target) in GOALS.items():
        v = summary.get(key)
        out[key] = {"goal": f"{op} {target:g}", "met": None if v is None else bool(ops[op](v, target))}
    return out


def table(res: dict) -> str:
    """Markdown table of the rows (the same function renders it in the docs)."""
    sys.path.insert(0, str(REPO / "tools"))
    from render_docs import serve_table

    return serve_table(res)


def _counts(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n.strip()]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 1 with a message when the audio or the abuse results are missing."""
    args = build_parser().parse_args(argv)
    if args.reps < 1:
        print(f"bench_serve: --reps must be at least 1, got {args.reps}", file=sys.stderr)
        return 1
    declared = list(DEPENDS_ON)
    abuse_path = Path(args.abuse_results) if args.abuse_results else None
    if abuse_path is not None and abuse_path.is_file() and abuse_path.resolve().is_relative_to(REPO):
        declared.append(abuse_path.resolve().relative_to(REPO).as_posix())
    record = run_record(depends_on=declared)
    abuse, abuse_source = {k: None for k in ABUSE_KEYS}, None
    if abuse_path is not None:
        try:
            abuse, abuse_source = abuse_results(abuse_path)
        except ValueError as e:
            print(f"bench_serve: {e} (pass --abuse-results '' to leave the abuse keys unmeasured)", file=sys.stderr)
            return 1
        if abuse_source["changed_since"] != []:
            print(f"bench_serve: warning: {abuse_path} is not current (the code it measured has changed since: "
                  f"{abuse_source['changed_since']}); run bench/bench_serve_abuse.py first for fresh abuse keys",
                  file=sys.stderr)
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
    ns_off = _counts(args.unbatched_clients)
    ns = sorted(set(_counts(args.clients)) | set(ns_off))  # every unbatched point has its tick partner
    ns_one = _counts(args.compare_workers_clients)
    alt = f"tick-{args.compare_workers}thread{'s' if args.compare_workers > 1 else ''}"
    n_max = max(ns + ns_off + ns_one + [args.flood_clients + 1])
    base = ["--model", args.model, "--data", args.data, "--max-clients", str(n_max),
            *args.server_args.split(), "--quantize", args.quantize]
    log_dir = Path(tempfile.mkdtemp(prefix="bench_serve_"))
    print(f"server logs in {log_dir}", file=sys.stderr)
    configs = {"tick": ["--batching", "tick"]}
    if ns_off:
        configs["off"] = ["--batching", "off"]
    if ns_one:
        configs[alt] = ["--batching", "tick", "--compute-workers", str(args.compare_workers)]
    runs: dict[str, list[dict]] = {}  # "config/N" -> one row per repetition
    pairs: dict[str, list[dict]] = {}
    flood = None
    if args.flood_clients:
        need = int((args.seconds + 5) * DEFAULT_MAX_RATE * 16000)  # enough for the whole row at the fastest pace
        flood = np.tile(np.concatenate(talks), -(-need // sum(map(len, talks))))[:need]
    servers: dict[str, Server] = {}
    t_start = time.monotonic()
    try:
        for key, extra in configs.items():
            servers[key] = Server([*base, *extra], log_dir / f"server_{key}.log")

        def run(key: str, n: int, rep: int, flooded: bool = False) -> dict:
            audios = [talks[i % len(talks)] for i in range(n)]
            name = f"{'flood' if flooded else key}/{n}"
            print(f"rep {rep + 1}/{args.reps}: {name}{' + 1 flooder' if flooded else ''} ...", file=sys.stderr,
                  flush=True)
            row = {"rep": rep, **measure(servers[key], audios, flood if flooded else None)}
            runs.setdefault(name, []).append(row)
            return row

        for rep in range(args.reps):
            for n in ns:
                if n not in ns_off:
                    run("tick", n, rep)
                    continue
                order = ("tick", "off") if rep % 2 == 0 else ("off", "tick")  # alternate which runs first
                cost = {mode: run(mode, n, rep)["cpu_s_per_audio_s"] for mode in order}
                pairs.setdefault(str(n), []).append(
                    {"rep": rep, **cost, "ratio": cost["tick"] / cost["off"] if cost["tick"] and cost["off"] else None})
            if args.flood_clients:
                run("tick", args.flood_clients, rep, flooded=True)
            for n in ns_one:
                run(alt, n, rep)
    finally:
        for server in servers.values():
            server.stop()
    wall_s = time.monotonic() - t_start

    rows: dict[str, dict] = {}
    for name, reps in runs.items():
        config, n = name.split("/")
        rows[name] = {"batching": "off" if config == "off" else "tick", "n": int(n), "flood": config == "flood",
                      "compute_workers": reps[0]["compute_workers"],
                      **repeated_point(reps, RT_P95_MS),
                      "streams_per_call": {kind: (spread(r["streams_per_call"].get(kind) for r in reps) or {}).get("median")
                                           for kind in reps[0]["streams_per_call"]},
                      "reps": reps}

    def median_of(name: str, key: str):
        r = rows.get(name)
        return r[key]["median"] if r and r.get(key) else None

    def cost_ratio(n: int) -> float | None:
        s = spread(p["ratio"] for p in pairs.get(str(n), []))
        return s["median"] if s else None

    flood_name = f"flood/{args.flood_clients}"
    summary = {
        "max_realtime_clients_client_p95": max_realtime_clients({r["n"]: r["realtime"] for k, r in rows.items()
                                                                 if k.startswith("tick/")}),
        **abuse,
        "batched_over_unbatched_cost_8_clients": cost_ratio(8),
        "flood_client_p95_ms": median_of(flood_name, "client_latency_ms_p95"),
        "max_realtime_clients_added_p95": max_realtime_clients({r["n"]: r["realtime_added_p95"]
                                                                for k, r in rows.items() if k.startswith("tick/")}),
        "client_p95_ms_8_clients": median_of("tick/8", "client_latency_ms_p95"),
        "p95_added_latency_ms_8_clients": median_of("tick/8", "added_latency_ms_p95"),
        "batched_over_unbatched_cost_16_clients": cost_ratio(16),
        "flood_p95_added_latency_ms": median_of(flood_name, "added_latency_ms_p95"),
    }
    summary["goals"] = goals(summary)
    res = {
        "summary": summary,
        "rows": rows,
        "cost_pairs": {n: {"ratio": spread(p["ratio"] for p in ps), "pairs": ps} for n, ps in pairs.items()},
        "abuse_results": abuse_source,
        "config": {"checkpoint": args.model, "data": args.data, "quantize": args.quantize,
                   "seconds_per_client": args.seconds, "reps": args.reps,
                   "talks": [str(w) for w in wavs], "frame_ms": 100, "sample_format": "int16",
                   "server_args": base[4:], "realtime_p95_ms": RT_P95_MS, "cpus": os.cpu_count(),
                   "flood_clients": args.flood_clients, "wall_s": round(wall_s, 1), "note": args.note},
        "provenance": finish_record(record),
    }
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(table(res))
    print(json.dumps({k: v for k, v in summary.items() if k != "goals"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
