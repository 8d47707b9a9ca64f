#!/usr/bin/env python
"""Thread scaling of a training update: seconds per update at 1 and 2 threads under OpenMP settings.

Each (threads, setting) runs the measurement of ``bench/bench_train.py`` (its ``--worker`` mode: the
same synthetic batches, full update with fused AdamW, MFU against the matmul peak measured in the same
process) in a fresh subprocess whose environment carries the setting, so that OpenMP reads it at
start-up. Rounds alternate the order of the rows (round 2 runs them backwards) so that a drift of the
machine's load hits every setting alike; the summary takes medians over the rounds.

Settings (``--settings``, each a set of environment variables; 1-thread rows use ``passive`` only, since
a single thread never waits for a sibling):

* ``passive``: ``OMP_WAIT_POLICY=PASSIVE``, what importing ``mmst`` sets: a thread that reaches the end
  of a parallel region sleeps at once (futex), and the next region must wake it (a system call, and in
  a virtual machine an inter-processor interrupt);
* ``active``: ``OMP_WAIT_POLICY=ACTIVE``: idle threads spin; no wake-up cost, but a spinning thread
  burns a core that another process may need (bench/NOTES.md, section 5);
* ``spin``: ``PASSIVE`` plus ``GOMP_SPINCOUNT=--spincount`` (libgomp: spin that many iterations, about
  ``--spincount / 100000`` ms, then sleep): the gaps between the parallel regions of a step are mostly
  shorter than that, so the wake-ups go, and an idle pool still sleeps after a fraction of a millisecond;
* ``bind``: ``PASSIVE`` plus ``OMP_PROC_BIND=close OMP_PLACES=cores`` (threads pinned to cores).

Summary per size: ``speedup_2t_over_1t`` per setting (median s/update at 1 thread over median at 2),
``peak_speedup_2t_over_1t`` (the measured 2048^2 fp32 matmul peak at 2 threads over 1: what the
hardware gives a large product), and ``best_setting``.

Results: ``docs/results/train_threads.json`` (``--out``) and a table.

Example::

    python bench/bench_threads.py                     # s, 1 and 2 threads, passive/active/spin, 2 rounds
    python bench/bench_threads.py --sizes xs --rounds 1 --frames 2000 --updates 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from provenance import RESULTS_DIR, run_record, write_results

from mmst.cli_help import ArgumentParser

#: The scripts this benchmark runs (bench_train.py does its measurement, in child processes); the repository modules
#: that they import are recorded at run time (``provenance.depends_on``, bench/provenance.py).
DEPENDS_ON = ("bench/bench_threads.py", "bench/bench_train.py")

REPO = Path(__file__).resolve().parents[1]
#: Environment variables a setting may set; every row's subprocess starts without any of them.
OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def settings(spincount: int) -> dict[str, dict[str, str]]:
    """The named OpenMP settings (see the module docstring): name -> environment variables."""
    return {"passive": {"OMP_WAIT_POLICY": "PASSIVE"},
            "active": {"OMP_WAIT_POLICY": "ACTIVE"},
            "spin": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": str(spincount)},
            "bind": {"OMP_WAIT_POLICY": "PASSIVE", "OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}}


def plan(sizes: list[str], names: list[str], rounds: int) -> list[tuple[int, str, int, str]]:
    """The rows in run order: ``(round, size, threads, setting)``; each round has the 1-thread ``passive``
    row and one 2-thread row per setting of each size, and every second round runs backwards."""
    one = [(size, 1, "passive") for size in sizes] + [(size, 2, n) for size in sizes for n in names]
    out = []
    for r in range(rounds):
        out += [(r, *row) for row in (one if r % 2 == 0 else one[::-1])]
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per size: median s/update per (threads, setting), ``speedup_2t_over_1t`` per setting (1-thread
    ``passive`` median over the 2-thread median), ``peak_speedup_2t_over_1t`` (median 2-thread matmul peak
    over the 1-thread one) and ``best_setting`` (the largest speed-up)."""
    out: dict[str, Any] = {}
    for size in dict.fromkeys(r["size"] for r in rows):
        mine = [r for r in rows if r["size"] == size]

        def med(key: str, threads: int, setting: str | None = None, mine=mine) -> float | None:
            xs = [r[key] for r in mine if r["threads"] == threads and (setting is None or r["setting"] == setting)]
            return statistics.median(xs) if xs else None

        one = med("s_per_update", 1, "passive")
        two = {n: med("s_per_update", 2, n) for n in dict.fromkeys(r["setting"] for r in mine if r["threads"] == 2)}
        speed = {n: (one / t if one and t else None) for n, t in two.items()}
        p1, p2 = med("peak_gflops", 1), med("peak_gflops", 2)
        best = max((n for n in speed if speed[n] is not None), key=lambda n: speed[n], default=None)
        out[size] = {"s_per_update_1t": one, "s_per_update_2t": two, "speedup_2t_over_1t": speed,
                     "mfu_1t": med("mfu", 1, "passive"), "mfu_2t": {n: med("mfu", 2, n) for n in two},
                     "peak_speedup_2t_over_1t": p2 / p1 if p1 and p2 else None, "best_setting": best}
    return out


def run_row(args: argparse.Namespace, size: str, threads: int, env_vars: dict[str, str]) -> dict[str, Any]:
    """One bench_train measurement in a fresh subprocess with ``env_vars``; returns its result dict.
    Raises ``RuntimeError`` when the subprocess fails."""
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARS}
    env.update(env_vars, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, str(REPO / "bench" / "bench_train.py"), "--frames", str(args.frames), "--updates",
           str(args.updates), "--warmup", str(args.warmup), "--specaugment", "none", "--omp-wait-policy", "",
           "--peak-n", str(args.peak_n), "--worker", size, str(threads), "fp32", "false"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if r.returncode or not line:
        raise RuntimeError(f"bench_train worker {size}/{threads} threads failed:\n{r.stderr[-2000:]}")
    return json.loads(line[-1][7:])


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(description=__doc__)
    p.add_argument("--sizes", nargs="+", default=["s"], help="model sizes")
    p.add_argument("--settings", nargs="+", default=["passive", "active", "spin"],
                   choices=["passive", "active", "spin", "bind"], help="OpenMP settings of the 2-thread rows")
    p.add_argument("--spincount", type=int, default=20000, help="GOMP_SPINCOUNT of the 'spin' setting")
    p.add_argument("--rounds", type=int, default=2, help="rounds over every row (order alternating)")
    p.add_argument("--frames", type=int, default=8000, help="padded fbank frames per batch (bench_train.py)")
    p.add_argument("--updates", type=int, default=3, help="timed updates per row")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up updates per row")
    p.add_argument("--peak-n", type=int, default=2048, help="matrix size of the peak matmul measurement")
    p.add_argument("--out", default=str(RESULTS_DIR / "train_threads.json"),
                   help="JSON output (default docs/results/train_threads.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: run every row, print a table, write JSON."""
    args = build_parser().parse_args(argv)
    record = run_record(depends_on=DEPENDS_ON)  # at the start: the code that runs (the workers add their imports)
    envs = settings(args.spincount)
    rows = []
    t0 = time.perf_counter()
    for rnd, size, threads, name in plan(args.sizes, args.settings, args.rounds):
        res = run_row(args, size, threads, envs[name])
        row = {"round": rnd, "size": size, "threads": threads, "setting": name, "env": envs[name],
               **{k: res[k] for k in ("s_per_update", "s_per_update_min", "s_per_update_max", "frames_per_s",
                                      "model_gflop_per_update", "achieved_gflops", "peak_gflops", "mfu",
                                      "batch_frames", "params")}}
        rows.append(row)
        print(f"  round {rnd + 1} {size} {threads}t {name}: {row['s_per_update']:.3f} s/update, MFU "
              f"{100 * row['mfu']:.1f}%, peak {row['peak_gflops']:.0f} GFLOP/s", flush=True)
    summary = summarize(rows)
    print("| size | setting | s/update 2 threads | speed-up 2t / 1t | MFU 2t |")
    print("|---|---|---|---|---|")
    for size, s in summary.items():
        for n, t in s["s_per_update_2t"].items():
            print(f"| {size} | {n} | {t:.3f} | {s['speedup_2t_over_1t'][n]:.2f} | {100 * s['mfu_2t'][n]:.1f}% |")
        print(f"{size}: 1 thread {s['s_per_update_1t']:.3f} s/update; matmul peak 2t / 1t "
              f"{s['peak_speedup_2t_over_1t']:.2f}; best {s['best_setting']}")
    config = {k: getattr(args, k) for k in ("sizes", "settings", "spincount", "rounds", "frames", "updates", "warmup",
                                            "peak_n")}
    write_results(args.out, {"provenance": record,
                             "config": config | {"cpus": os.cpu_count(), "loadavg_1min": os.getloadavg()[0],
                                                 "runtime_s": time.perf_counter() - t0},
                             "rows": rows, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
