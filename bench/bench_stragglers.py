"""Straggler benchmark: DDP vs DropCompute vs parameter server under injected compute variance.

For W in {1, 2, 4, 8} workers and each scenario

* ``cv0``      - deterministic delay (``const``; the "CV = 0" reference),
* ``ln0.3``    - lognormal delay, CV 0.3,
* ``ln0.5``    - lognormal delay, CV 0.5,
* ``slow``     - deterministic delay, one worker 2x slower (``--slow-rank``),

it trains the fixed small task (:mod:`mmst.simulation.toy`) with each mode and reports samples/s,
scaling efficiency against W x single-worker (the W=1 DDP run of the same delay distribution, without
the slow rank), the ratio to the cv0 run at the same W, the analytic
prediction (:mod:`mmst.simulation.step_time`), drop rate, staleness and time to the target loss.

DropCompute uses ``--compute-threshold auto`` capped at an expected drop rate of 15% (``--max-drop-rate``;
the paper's unconstrained argmax is stored in ``tau_info`` as ``unconstrained_*``). The parameter server
uses ``--staleness-lr`` (lr / staleness; at lr 0.2 plain async SGD diverges with W >= 4) and no SSP
bound (``--max-staleness inf``).

Simulated compute: every micro-batch sleeps ``base x X`` (``--base-ms``, X the delay multiplier) so 8
ranks fit on 2 cores; the real compute is a tiny MLP (~0.1 ms). Param-server runs use W workers + 1
server process. All ranks of one W are started once (spawn, gloo) and run every (mode, scenario) job in
turn, re-creating the process group per job on a fresh port.

Analytic prediction (DDP, Eq. 1-3 of straggler_model): ``step = E[max_n sum_m t_nm] + c_W`` (Monte
Carlo and Blom) with ``t_nm`` resampled per rank from the micro-batch times measured in that run
(micro-batches 1..M-1: the last one contains DDP's all-reduce wait), and the overhead ``c_W`` = measured
step time - realised max over ranks of (first M-1 micro-batches + one micro-batch of the rank's mean
time), i.e. the
all-reduce/optimiser/Python time of the same run. The comparison therefore tests the order-statistic
part of the model: predicted ``E[max_n sum_m t_nm]`` from the marginal micro-batch times vs what the
run realised. (``pred_eff_mc_cv0_overhead`` in the JSON uses the overhead of the cv0 run instead;
noisier on a shared machine.) Efficiency = single-worker step time of the scenario / predicted step. For DropCompute the table shows the model's expected
speed-up over synchronous training, drop rate and overshoot past tau at the chosen tau (Eq. 4-7, which
model the real check points: before each micro-batch and between forward and backward; injected delays
are never cut at tau). The measured overshoot is the slowest rank's, ``max(0, max_n compute_n - tau)``
per step (``overshoot_s_max``; rank 0's own is ``overshoot_s``), the quantity Eq. 7 predicts.

Usage::

    python bench/bench_stragglers.py            # full: W = 1,2,4,8 (5-7 min on a loaded 2-core machine)
    python bench/bench_stragglers.py --quick    # W = 1,4, cv0 + ln0.5 only (~1.5 min)
    python bench/bench_stragglers.py --reanalyse docs/results/stragglers.json   # predictions only

Writes ``docs/results/stragglers.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from provenance import RESULTS_DIR, finish_record, run_record

from mmst.cli_help import ArgumentParser
from mmst.distributed.env import find_free_port
from mmst.simulation.run import build_parser as build_run_parser
from mmst.simulation.run import train
from mmst.simulation.step_time import expected_max_sum_blom, expected_max_sum_mc

#: The paths this benchmark runs without importing them; the repository modules that it and its child processes
#: import are recorded at run time (``provenance.depends_on``, bench/provenance.py).
DEPENDS_ON = ("bench/bench_stragglers.py",)

SCENARIOS = {"cv0": ("const", False), "ln0.3": ("lognormal:cv=0.3", False),
             "ln0.5": ("lognormal:cv=0.5", False), "slow": ("const", True)}
MODES = ("ddp", "dropcompute", "param-server")


def _job_argv(mode: str, scen: str, w: int, a: argparse.Namespace) -> list[str]:
    delay, slow = SCENARIOS[scen]
    argv = ["--distributed", mode, "--steps", str(a.steps), "--update-freq", str(a.update_freq),
            "--straggler-delay", delay, "--straggler-base-ms", str(a.base_ms), "--auto-steps", str(a.auto_steps),
            "--eval-every", "2", "--log-every", "0", "--dist-timeout", "60", "--seed", "1", "--record-micro"]
    if mode == "param-server":
        argv += ["--staleness-lr", "--max-staleness", "inf"]
    if a.target_loss is not None:
        argv += ["--target-loss", str(a.target_loss)]
    if slow:
        argv += ["--slow-rank", f"{w if mode == 'param-server' else w - 1}:{a.slow_factor}"]
    if a.max_drop_rate is not None:
        argv += ["--max-drop-rate", str(a.max_drop_rate)]
    return argv


def _proc(idx: int, jobs: list[tuple[str, str, int, list[str], int]], outdir: str) -> None:
    import logging

    logging.basicConfig(level=logging.ERROR)
    for j, (_mode, _scen, world, argv, port) in enumerate(jobs):
        if idx >= world:
            continue
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(idx), WORLD_SIZE=str(world),
                          LOCAL_RANK=str(idx))
        try:
            res = train(build_run_parser().parse_args(argv))
        except Exception as e:  # noqa: BLE001 - recorded, the bench goes on
            res = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        if idx == 0:
            Path(outdir, f"job{j}.json").write_text(json.dumps(res))


def run_w(w: int, scenarios: list[str], modes: list[str], a: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every (mode, scenario) job for W workers in one set of W+1 processes; returns rank-0 metrics."""
    jobs = []
    for scen in scenarios:
        for mode in modes:
            world = w + 1 if mode == "param-server" else w
            jobs.append((mode, scen, world, _job_argv(mode, scen, w, a), find_free_port()))
    nprocs = max(j[2] for j in jobs)
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_proc, args=(i, jobs, tmp)) for i in range(nprocs)]
        for p in procs:
            p.start()
        t0 = time.monotonic()
        for p in procs:
            p.join(max(1.0, a.timeout - (time.monotonic() - t0)))
        for p in procs:
            if p.is_alive():
                p.kill()
        out = []
        for j, (mode, scen, world, _argv, _port) in enumerate(jobs):
            f = Path(tmp, f"job{j}.json")
            r = json.loads(f.read_text()) if f.exists() else {"error": "no result (timeout or crash)"}
            r.update(mode=mode, scenario=scen, W=w, world_size=world)
            out.append(r)
        return out


def analyse(rows: list[dict[str, Any]], m: int) -> None:
    """Add efficiency, ratio-to-cv0 and the analytic predictions to each row (in place)."""
    by = {(r["mode"], r["scenario"], r["W"]): r for r in rows}
    for r in rows:
        if "error" in r:
            continue
        scen_base = "cv0" if r["scenario"] == "slow" else r["scenario"]
        one = by.get(("ddp", scen_base, 1))
        if one and "error" not in one and one["samples_per_s"]:
            r["efficiency"] = r["samples_per_s"] / (r["W"] * one["samples_per_s"])
        ref = by.get((r["mode"], "cv0", r["W"]))
        if ref and "error" not in ref and ref["samples_per_s"]:
            r["ratio_to_cv0"] = r["samples_per_s"] / ref["samples_per_s"]
        ddp = by.get(("ddp", r["scenario"], r["W"]))
        if ddp and "error" not in ddp and ddp["samples_per_s"]:
            r["speedup_vs_ddp"] = r["samples_per_s"] / ddp["samples_per_s"]
        if r["mode"] == "ddp" and "micro_times_s" in r:
            t = np.asarray(r["micro_times_s"], dtype=float)  # (N, steps, M); micro-batch M holds the all-reduce
            first = t[:, :, : max(1, m - 1)]
            pools = [x.ravel() for x in first]
            # overhead of THIS run: step time - realised max over ranks of (first M-1 micro-batches + one
            # micro-batch of that rank's mean time)
            per_rank_mean = first.mean(axis=(1, 2))[:, None] if m > 1 else np.zeros((t.shape[0], 1))
            realised = float(np.mean((first.sum(axis=2) + per_rank_mean).max(axis=0)))
            c_w = max(0.0, r["step_time_s"] - realised)
            ref_t = np.asarray(ref["micro_times_s"], dtype=float) if ref and "micro_times_s" in ref else t
            c_cv0 = max(0.0, ref["step_time_s"] - m * float(np.nanmean(ref_t[:, :, : max(1, m - 1)]))) if ref else 0.0
            t1 = by.get(("ddp", scen_base, 1))
            t1_step = t1["step_time_s"] if t1 and "error" not in t1 else m * np.nanmean(t)
            emax = expected_max_sum_mc(pools, r["W"], m)
            mc, bl = emax + c_w, expected_max_sum_blom(pools, r["W"], m) + c_w
            r.update(pred_step_mc_s=mc, pred_step_blom_s=bl, pred_eff_mc=t1_step / mc, pred_eff_blom=t1_step / bl,
                     overhead_c_s=c_w, overhead_cv0_s=c_cv0, pred_eff_mc_cv0_overhead=t1_step / (emax + c_cv0),
                     eff_step=t1_step / r["step_time_s"])
        if r["mode"] == "dropcompute" and r.get("tau_info"):
            r["pred_speedup"] = r["tau_info"].get("speedup")
            r["pred_drop_rate"] = r["tau_info"].get("drop_rate")
            r["pred_overshoot_s"] = r["tau_info"].get("overshoot_s")
        if r["mode"] != "ddp":
            r.pop("micro_times_s", None)  # DDP rows keep them (for re-analysis)


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    return fmt.format(x)


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the benchmark rows."""
    head = ("| W | scenario | mode | samples/s | eff. vs W x 1 | ratio to cv0 | x DDP | pred. eff (MC/Blom) "
            "| drop rate (pred.) | tau ms | overshoot ms, slowest rank (pred.) | staleness mean/max | time to target s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['W']} | {r['scenario']} | {r['mode']} | error: {r['error'][:60]} |")
            continue
        pred = (f"{_f(r.get('pred_eff_mc'))}/{_f(r.get('pred_eff_blom'))}" if r["mode"] == "ddp"
                else (f"x{_f(r.get('pred_speedup'))} vs sync" if r["mode"] == "dropcompute" else "-"))
        drop = "-" if r["mode"] != "dropcompute" else f"{_f(r['drop_rate'], '{:.3f}')} ({_f(r.get('pred_drop_rate'), '{:.3f}')})"
        tau = _f(r["tau_s"] * 1000, "{:.1f}") if r["mode"] == "dropcompute" else "-"
        over = "-"
        if r["mode"] == "dropcompute" and "overshoot_s_max" in r:  # the slowest rank's, what Eq. 7 predicts
            pred_over = r.get("pred_overshoot_s")
            over = (f"{_f(r['overshoot_s_max'] * 1000, '{:.1f}')} "
                    f"({_f(pred_over * 1000 if pred_over is not None else None, '{:.1f}')})")
        stale = f"{_f(r.get('staleness_mean'))}/{r.get('staleness_max')}" if r["mode"] == "param-server" else "-"
        lines.append(f"| {r['W']} | {r['scenario']} | {r['mode']} | {r['samples_per_s']:.0f} | {_f(r.get('efficiency'))} "
                     f"| {_f(r.get('ratio_to_cv0'))} | {_f(r.get('speedup_vs_ddp'))} | {pred} | {drop} | {tau} | {over} | {stale} "
                     f"| {_f(r.get('time_to_target_s'))} |")
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="W=1,4 and cv0/ln0.5 only, fewer steps (~1 min)")
    p.add_argument("--workers", default=None, help="comma-separated W list (default 1,2,4,8; quick 1,4)")
    p.add_argument("--scenarios", default=None, help=f"comma-separated subset of {list(SCENARIOS)}")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of modes")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default 30; quick 20)")
    p.add_argument("--update-freq", type=int, default=4, help="M micro-batches per worker per step")
    p.add_argument("--base-ms", type=float, default=30.0, help="simulated compute per micro-batch (ms)")
    p.add_argument("--slow-factor", type=float, default=2.0, help="slow-rank factor of the 'slow' scenario")
    p.add_argument("--auto-steps", type=int, default=5, help="DropCompute auto-tau steps (also excluded from throughput)")
    p.add_argument("--max-drop-rate", type=float, default=0.15,
                   help="cap on the expected drop rate for DropCompute auto tau (negative = none, the paper's argmax)")
    p.add_argument("--target-loss", type=float, default=0.06, help="eval MSE target for time-to-target")
    p.add_argument("--timeout", type=float, default=400.0, help="seconds per W before processes are killed")
    p.add_argument("--out", default=str(RESULTS_DIR / "stragglers.json"), help="JSON output path (default docs/results/stragglers.json)")
    p.add_argument("--reanalyse", default=None, help="recompute predictions/table from this JSON (no runs)")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI: run the benchmark, print the table, write the JSON."""
    a = build_parser().parse_args(argv)
    if a.reanalyse:
        old = json.loads(Path(a.reanalyse).read_text())
        rows = old["rows"]
        analyse(rows, int(old["config"]["update_freq"]))
        old["table_markdown"] = tab = table(rows)
        print(tab)
        Path(a.out).write_text(json.dumps(old, indent=1, default=str))
        return 0
    ws = [int(x) for x in (a.workers or ("1,4" if a.quick else "1,2,4,8")).split(",")]
    scens = (a.scenarios or ("cv0,ln0.5" if a.quick else ",".join(SCENARIOS))).split(",")
    modes = a.modes.split(",")
    a.steps = a.steps or (20 if a.quick else 30)
    if a.max_drop_rate is not None and a.max_drop_rate < 0:
        a.max_drop_rate = None
    if 1 not in ws:
        ws = [1, *ws]  # the single-worker reference is needed for efficiencies
    t0 = time.time()
    record = run_record(depends_on=DEPENDS_ON)  # the commit and command the run starts from
    rows: list[dict[str, Any]] = []
    for w in ws:
        tw = time.time()
        rows += run_w(w, scens, modes, a)
        print(f"W={w}: {time.time() - tw:.0f}s", file=sys.stderr, flush=True)
    analyse(rows, a.update_freq)
    tab = table(rows)
    print(tab)
    meta = {k: v for k, v in vars(a).items()}
    out = {"provenance": finish_record(record), "config": meta, "runtime_s": time.time() - t0, "rows": rows,
           "table_markdown": tab}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {a.out} in {time.time() - t0:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
