"""Straggler benchmark on the real model: DDP vs DropCompute vs parameter server inside ``mmst-train``.

Trains the quickstart ``xs`` unified model on the synthetic corpus with ``torchrun`` (gloo, one thread
per rank) for W data ranks in each of

* ``ln0.5`` - an injected lognormal delay per micro-batch, CV 0.5, proportional to that rank's measured
  micro-batch compute (``--straggler-delay lognormal:cv=0.5``, ``straggler_fraction=1``), so long
  utterances get long delays;
* ``slow``  - one persistent 2x slow rank (``--slow-rank R:2``), no other delay;

and the modes DDP, DropCompute (``--compute-threshold auto``) and the parameter server (W workers + 1
server process, SSP ``s = W``, the default). Every run consumes the same data per update (``W x M``
micro-batches; see ``mmst.training.distributed``), so the dev-loss curves are comparable.

Reported per (W, scenario, mode), as seed means (``--seeds``):

* samples/s = micro-batches used per training second x mean samples per micro-batch of the corpus;
* drop rate (DropCompute), staleness mean / max (parameter server), injected-delay share of a rank's
  busy time (DDP / DropCompute);
* time to a target dev loss. Target rule, the same for every mode: the dev loss of a single-process
  reference run that sees the same samples per update, at its first validation at or after 2/3 of its
  updates. A curve run validates every ``--valid-every`` updates (default 2); the crossing time is
  interpolated linearly between the validation before and the first one at or below the target, on
  the training clock (validation time excluded); the row reports the median over the curve seeds;
* the dev loss at equal training time: each mode's loss (interpolated) at the moment the DDP run of
  the same seed reached the target (median over the curve seeds);
* predictions beside measurements: DropCompute's ``tau_info`` (the Eq. 4-7 model evaluated on the
  micro-batch times recorded during its ``auto`` steps) predicts its drop rate, its effective samples/s
  and, from the same recorded times, the synchronous (DDP) samples/s; the table shows each next to
  the measured value (seed means). The relative error of the predicted samples/s is taken per run (a
  DDP run against the prediction of the DropCompute run of the same seed), and a row reports the
  largest over its runs (``pred_error_samples_per_s``; each run's in ``pred_error_samples_per_s_runs``);
* a 95% paired bootstrap interval over seeds for each samples/s ratio to DDP (a mode's runs paired with the
  DDP runs of the same seeds; 10,000 resamples, fixed seed; rows with >= 2 seeds), in the table and, at W = 2,
  in the summary (``x_ddp_samples_per_s_ci_w2``). ``--from-json`` recomputes these intervals from the runs
  stored in an earlier result, without training, and records that in its provenance;
* a dev-loss-vs-time plot (first seed).

Throughput, drop rate and overshoot count the log windows from update ``--auto-warmup-steps`` +
``--auto-steps`` on, in every mode (DropCompute runs with tau = inf until then: warm-up steps unrecorded,
then the recorded ones).

A row whose processes outnumber the machine's cores (W = 4 on 2 cores; the parameter server's extra
process at W = 2) is labelled ``oversubscribed``: ranks share cores, so the injected delays (sleeps)
overlap with other ranks' compute. With one 2x slow rank at W = 2 (one core per rank) the headline
numbers are the ``*_slow_w2`` keys of the summary. The JSON records the machine; the table says where
a goal is missed.

Usage::

    python bench/bench_stragglers_mmst.py            # full: W = 2, 4; both scenarios; 3 seeds (<= 60 min)
    python bench/bench_stragglers_mmst.py --quick --data DATA   # W = 2, slow rank, 1 seed, tiny model (CI)
    python bench/bench_stragglers_mmst.py --quick --launcher direct --data DATA   # the ranks without torchrun's agent
    python bench/bench_stragglers_mmst.py ... --resume   # rerun only what an earlier invocation did not finish
    python bench/bench_stragglers_mmst.py --from-json docs/results/stragglers_mmst.json   # intervals from its runs

Writes ``docs/results/stragglers_mmst.json`` (``summary`` first), ``docs/results/stragglers_mmst.md``
and ``docs/images/stragglers_mmst.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from provenance import REPO, RESULTS_DIR, finish_record, run_record

from mmst.cli_help import ArgumentParser
from mmst.distributed.env import find_free_port
from mmst.distributed.report import (
    loss_at_time,
    paired_bootstrap_ratio,
    read_log,
    reference_target,
    run_summary,
    time_to_target,
)
from mmst.provenance import git_commit

#: The paths this benchmark runs without importing them; the repository modules that it and its child processes
#: import are recorded at run time (``provenance.depends_on``, bench/provenance.py).
DEPENDS_ON = ("bench/bench_stragglers_mmst.py",)

SCENARIOS = {"ln0.5": ["--straggler-delay", "lognormal:cv=0.5", "distributed.options.straggler_fraction=1.0"],
             "slow": []}
MODES = ("ddp", "dropcompute", "param-server")
#: opt-in control (``--modes``): DropCompute's code path with tau = inf, i.e. synchronous SGD that never
#: drops, with DropCompute's single flat all-reduce after the backward instead of DDP's bucketed one
CONTROL_MODES = ("dropcompute-inf",)
TINY = ["model.overrides.d_model=32", "model.overrides.encoder_layers=1", "model.overrides.decoder_layers=1",
        "model.overrides.ffn_dim=32", "model.overrides.conv_channels=32", "model.overrides.attention_heads=2",
        "criterion.ctc_weight=0"]
GOALS = {"dropcompute_over_ddp_samples_per_s": (">=", 1.08), "dropcompute_drop_rate": ("<=", 0.15),
         "dropcompute_over_ddp_time_to_target": ("<=", 1.0), "param_server_over_ddp_slow_rank": (">=", 1.2),
         "dropcompute_over_ddp_time_to_target_slow_w2": ("<=", 0.8),
         "dropcompute_over_ddp_samples_per_s_slow_w2": (">=", 1.15), "dropcompute_drop_rate_slow_w2": ("<=", 0.3),
         "prediction_error_samples_per_s_max": ("<=", 0.15), "curve_seeds": (">=", 3)}
#: summary keys reported without a goal (the parameter server's server is a third process on 2 cores)
REPORTED = ("param_server_over_ddp_samples_per_s_slow_w2",)
#: the interval of each samples/s ratio to DDP: paired bootstrap over seeds (mmst.distributed.report.paired_bootstrap_ratio)
CI_LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 10000
BOOTSTRAP_SEED = 0


def _train_args(a: argparse.Namespace, save: Path, seed: int) -> list[str]:
    """mmst-train arguments of one run: a curve run (seed <= ``--curve-seeds``: ``--updates`` updates,
    validation every ``--valid-every``) or a throughput run (``--throughput-updates`` updates, validated
    only where the trainer always validates). Both follow the same learning-rate schedule."""
    curve = seed <= a.curve_seeds
    updates = a.updates if curve else a.throughput_updates
    valid_every = a.valid_every if curve else updates
    args = ["--config", str(a.config), "--data", str(a.data), "--save-dir", str(save), "--log-level", "INFO",
            f"seed={seed}", "num_threads=1", "logging.progress_bar=false", "logging.tensorboard=false",
            f"optim.max_update={updates}", f"optim.update_freq={a.update_freq}", f"data.max_tokens={a.max_tokens}",
            f"optim.warmup_updates={max(1, a.updates // 8)}", f"valid.interval_updates={valid_every}",
            f"logging.log_interval={a.log_every}", "valid.bleu_subset=0", "valid.best_metric=loss",
            "checkpoint.save_interval_updates=0",
            "checkpoint.resume=false"]
    return args + (TINY if a.tiny else []) + a.train_overrides.split()


def _valid_subset_view(data: Path, n: int, root: Path) -> Path:
    """A view of DATA (symbolic links) whose ``dev`` split is the first ``n`` utterances of DATA's: one fixed,
    cheaper validation set for every run, so validating every few updates stays affordable."""
    view = root / "data_view"
    view.mkdir()
    for f in data.iterdir():
        if f.name != "dev.tsv":
            (view / f.name).symlink_to(f.resolve())
    lines = (data / "dev.tsv").read_text().splitlines(keepends=True)
    if len(lines) < 2:
        raise SystemExit(f"{data / 'dev.tsv'}: no utterances")
    (view / "dev.tsv").write_text("".join(lines[: n + 1]))
    return view


def _run(cmd: list[str], timeout: float) -> tuple[int, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        return 124, f"timed out after {timeout:.0f}s: {(e.stderr or '')[-2000:]}"
    return p.returncode, p.stdout + p.stderr


def launch_commands(launcher: str, nproc: int, args: list[str]) -> list[tuple[list[str], dict[str, str]]]:
    """The processes of one distributed run of ``mmst-train args`` on ``nproc`` ranks, as ``(command, extra
    environment)``: ``torchrun`` one ``torchrun`` command (its agent starts the ranks); ``direct`` the ranks
    themselves, with the environment torchrun gives them (no agent process: one interpreter fewer per run)."""
    port = str(find_free_port())
    cli = ["-m", "mmst.training.cli", *args]
    if launcher == "torchrun":
        return [([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--rdzv-backend",
                  "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", *cli], {})]
    if launcher != "direct":
        raise ValueError(f"launcher {launcher!r}: expected torchrun or direct")
    return [([sys.executable, *cli], {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(r),
                                      "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(nproc)})
            for r in range(nproc)]


def _run_ranks(procs: list[tuple[list[str], dict[str, str]]], timeout: float) -> tuple[int, str]:
    """Run the processes of one run (:func:`launch_commands`) together: the first non-zero exit status (the others
    are then stopped, as torchrun's agent stops them) or 0, and their outputs one after the other (124 after
    ``timeout``)."""
    if len(procs) == 1 and not procs[0][1]:
        return _run(procs[0][0], timeout)
    with tempfile.TemporaryDirectory() as logs:
        running = []
        for i, (cmd, extra) in enumerate(procs):
            with open(Path(logs) / f"{i}.log", "w") as fh:
                running.append(subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO,
                                                env={**os.environ, "OMP_NUM_THREADS": "1", **extra}))
        deadline = time.monotonic() + timeout
        while True:
            codes = [p.poll() for p in running]
            rc = next((c for c in codes if c), 0)
            if rc or None not in codes:
                break
            if time.monotonic() > deadline:
                rc = 124
                break
            time.sleep(0.05)
        for p in running:
            if p.poll() is None:
                p.kill()
            p.wait()
        out = "".join((Path(logs) / f"{i}.log").read_text() for i in range(len(procs)))
    return rc, (f"timed out after {timeout:.0f}s: " if rc == 124 else "") + out


def run_one(a: argparse.Namespace, w: int, mode: str, scen: str | None, seed: int, root: Path) -> dict[str, Any]:
    """One training run; ``mode`` ``none`` is the single-process reference (``W x M`` micro-batches per
    update). Returns its :func:`~mmst.distributed.report.run_summary` (or ``error``) and the wall time."""
    save = root / f"W{w}_{scen or 'ref'}_{mode}_s{seed}"
    args = _train_args(a, save, seed)
    if mode == "none":
        args = [*args, f"optim.update_freq={w * a.update_freq}"]
        procs = [([sys.executable, "-m", "mmst.training.cli", *args], {})]
    else:
        nproc = w + 1 if mode == "param-server" else w
        dist = "dropcompute" if mode == "dropcompute-inf" else mode
        args += ["--distributed", dist, "--dist-timeout", str(a.dist_timeout), *SCENARIOS[scen or "ln0.5"]]
        if scen == "slow":
            args += ["--slow-rank", f"{w if mode == 'param-server' else w - 1}:2"]
        if mode == "dropcompute":
            args += ["--compute-threshold", "auto", f"distributed.options.auto_steps={a.auto_steps}",
                     f"distributed.options.auto_warmup_steps={a.auto_warmup_steps}"]
        if mode == "dropcompute-inf":
            args += ["--compute-threshold", "inf"]
        procs = launch_commands(a.launcher, nproc, args)
    t0 = time.monotonic()
    rc, out = _run_ranks(procs, a.run_timeout)
    row: dict[str, Any] = {"W": w, "scenario": scen, "mode": mode, "seed": seed, "curve_run": seed <= a.curve_seeds,
                           "wall_s": time.monotonic() - t0}
    if rc != 0:
        lines = out.strip().splitlines() or [""]
        why = next((ln for ln in reversed(lines) if "mmst-train:" in ln or "Error" in ln), lines[-1])
        row["error"] = f"exit {rc}: {why[:300]}"
        return row
    try:
        row.update(run_summary(read_log(save / "train_log.jsonl"), w, a.update_freq, measure_from=a.auto_warmup_steps + a.auto_steps))
    except (OSError, ValueError) as e:
        row["error"] = str(e)
    m = re.search(r"(\d+) train utterances \((\d+) batches/epoch\)", out)
    if m:
        row["samples_per_microbatch"] = int(m.group(1)) / max(1, int(m.group(2)))
    return row


def _mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if isinstance(x, (int, float))]
    return sum(xs) / len(xs) if xs else None


def _median(xs: list[Any]) -> float | None:
    xs = sorted(x for x in xs if isinstance(x, (int, float)))
    if not xs:
        return None
    k = len(xs) // 2
    return xs[k] if len(xs) % 2 else (xs[k - 1] + xs[k]) / 2


def _rel_err(pred: float | None, meas: float | None) -> float | None:
    return abs(pred / meas - 1.0) if pred is not None and meas else None


def _run_pred_error(run: dict[str, Any], dc_info: dict[str, Any] | None, w: int, update_freq: int) -> float | None:
    """Relative error of one run's predicted micro-batches/s: a DropCompute run against its own ``tau_info``
    (``speed``), a DDP run against the synchronous rate ``W M / sync_step_s`` predicted by the DropCompute run of
    the same seed (``dc_info``); None for other modes or without a prediction."""
    if run["mode"] == "dropcompute":
        pred = (run.get("tau_info") or {}).get("speed")
    elif run["mode"] == "ddp" and dc_info and dc_info.get("sync_step_s"):
        pred = w * update_freq / dc_info["sync_step_s"]
    else:
        return None
    return _rel_err(pred, run.get("microbatches_per_s"))


def _groups(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """The distributed runs by (W, scenario, mode), in order (the single-process reference runs left out)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["mode"] != "none":
            groups.setdefault((r["W"], r["scenario"], r["mode"]), []).append(r)
    return groups


def aggregate(rows: list[dict[str, Any]], targets: dict[int, float], spm: float, cores: int,
              update_freq: int) -> list[dict[str, Any]]:
    """Per (W, scenario, mode): seed means of samples/s and drop rate, the median time to target and dev loss
    at DDP's time to target over the curve seeds, the predictions of DropCompute's ``tau_info`` (seed means)
    beside the measurements, the relative error of the predicted samples/s per run and its maximum over the
    runs, and ratios to DDP (module docstring)."""
    groups = _groups(rows)
    # DDP's time to target per (W, scenario, seed): the time at which every mode's loss is compared
    ddp_ttt = {(r["W"], r["scenario"], r["seed"]): time_to_target(r["curve"], targets[r["W"]])
               for r in rows if r["mode"] == "ddp" and "error" not in r and r["curve_run"] and r["W"] in targets}
    # each DropCompute run's model predictions, by (W, scenario, seed): a DDP run is compared with the same seed's
    dc_info = {(r["W"], r["scenario"], r["seed"]): r["tau_info"] for r in rows
               if r["mode"] == "dropcompute" and "error" not in r and r.get("tau_info")}
    out = []
    for (w, scen, mode), rs in groups.items():
        ok = [r for r in rs if "error" not in r]
        curves = [r for r in ok if r["curve_run"]]
        ttt = [time_to_target(r["curve"], targets[w]) if w in targets else None for r in curves]
        at_ddp = [loss_at_time(r["curve"], t) for r in curves
                  if (t := ddp_ttt.get((w, scen, r["seed"]))) is not None]
        infos = [r["tau_info"] for r in ok if r.get("tau_info")]
        nproc = w + 1 if mode == "param-server" else w
        agg = {"W": w, "scenario": scen, "mode": mode, "seeds": len(ok), "errors": [r["error"] for r in rs if "error" in r],
               "processes": nproc, "oversubscribed": nproc > cores,
               "samples_per_s": (_mean([r["microbatches_per_s"] for r in ok]) or 0.0) * spm if ok else None,
               "drop_rate": _mean([r["drop_rate"] for r in ok]), "staleness_mean": _mean([r["staleness_mean"] for r in ok]),
               "staleness_max": max((r["staleness_max"] for r in ok if r["staleness_max"] is not None), default=None),
               "delay_share": _mean([r["delay_share"] for r in ok]),
               "time_to_target_s": _median(ttt) if ttt and all(t is not None for t in ttt) else None,
               "reached_target": sum(t is not None for t in ttt), "curve_seeds": len(ttt), "target_loss": targets.get(w),
               "dev_loss_at_ddp_time_to_target": _median(at_ddp),
               "tau_s": _mean([r["tau_s"] for r in ok]),
               "overshoot_s_slowest": _mean([r.get("overshoot_s_slowest") for r in ok]),
               "pred_drop_rate": _mean([i.get("drop_rate") for i in infos]),
               "pred_samples_per_s": (_mean([i.get("speed") for i in infos]) or 0.0) * spm if infos else None,
               "pred_sync_samples_per_s": (_mean([w * update_freq / i["sync_step_s"] for i in infos
                                                  if i.get("sync_step_s")]) or 0.0) * spm if infos else None,
               "pred_overshoot_s": _mean([i.get("overshoot_s") for i in infos])}
        errs = [e for r in ok if (e := _run_pred_error(r, dc_info.get((w, scen, r["seed"])), w, update_freq)) is not None]
        agg["pred_error_samples_per_s_runs"] = errs
        agg["pred_error_samples_per_s"] = max(errs) if errs else None
        out.append(agg)
    by = {(r["W"], r["scenario"], r["mode"]): r for r in out}
    for r in out:
        ddp = by.get((r["W"], r["scenario"], "ddp"))
        if ddp and ddp["samples_per_s"] and r["samples_per_s"]:
            r["x_ddp_samples_per_s"] = r["samples_per_s"] / ddp["samples_per_s"]
        if ddp and ddp["time_to_target_s"] and r["time_to_target_s"]:
            r["x_ddp_time_to_target"] = r["time_to_target_s"] / ddp["time_to_target_s"]
        if r["mode"] != "ddp":
            r["x_ddp_samples_per_s_ci"] = ratio_interval(groups[(r["W"], r["scenario"], r["mode"])],
                                                         groups.get((r["W"], r["scenario"], "ddp"), []))
        dc = by.get((r["W"], r["scenario"], "dropcompute"))
        if r["mode"] == "ddp" and dc:  # DDP's prediction comes from DropCompute's recorded synchronous steps
            r["pred_samples_per_s"] = dc["pred_sync_samples_per_s"]
    order = MODES + CONTROL_MODES
    return sorted(out, key=lambda r: (r["W"], r["scenario"], order.index(r["mode"])))


def ratio_interval(runs: list[dict[str, Any]], ddp_runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The :data:`CI_LEVEL` paired bootstrap interval of a mode's samples/s over DDP's (the ratio of seed means,
    as the table's ``x DDP``), pairing each run with the DDP run of the same seed (same data order, same injected
    delays); the runs' samples per micro-batch cancel in the ratio. ``None`` with fewer than 2 paired seeds.

    Returns:
        ``{"low", "high", "level", "seeds" (the paired seeds), "resamples", "bootstrap_seed"}``.
    """
    ddp = {r["seed"]: r["microbatches_per_s"] for r in ddp_runs if "error" not in r and r.get("microbatches_per_s")}
    pairs = sorted((r["seed"], r["microbatches_per_s"], ddp[r["seed"]]) for r in runs
                   if "error" not in r and r.get("microbatches_per_s") and r["seed"] in ddp)
    if len(pairs) < 2:
        return None
    low, high = paired_bootstrap_ratio([p[1] for p in pairs], [p[2] for p in pairs], BOOTSTRAP_RESAMPLES,
                                       BOOTSTRAP_SEED, CI_LEVEL)
    return {"low": low, "high": high, "level": CI_LEVEL, "seeds": [p[0] for p in pairs],
            "resamples": BOOTSTRAP_RESAMPLES, "bootstrap_seed": BOOTSTRAP_SEED}


def w2_intervals(agg: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The W = 2 intervals of every samples/s ratio to DDP, ``{scenario: {mode: ratio_interval}}`` (the summary's
    ``x_ddp_samples_per_s_ci_w2``)."""
    out: dict[str, dict[str, Any]] = {}
    for r in agg:
        if r["W"] == 2 and r.get("x_ddp_samples_per_s_ci"):
            out.setdefault(r["scenario"], {})[r["mode"]] = r["x_ddp_samples_per_s_ci"]
    return out


def summary(agg: list[dict[str, Any]], curve_seeds: int) -> dict[str, Any]:
    """The headline numbers: the original keys at the largest W (W = 4 in the full run, oversubscribed on
    2 cores; CV 0.5, slow rank for the parameter server), and the ``*_slow_w2`` keys at W = 2 with one 2x
    slow rank (one core per rank on 2 cores). ``prediction_error_samples_per_s_max``: the largest relative
    error of the predicted samples/s over every run of the DDP and DropCompute rows at W = 2 (per run, never of
    seed means). ``curve_seeds``: curve
    runs per row (the time to target is their median). ``x_ddp_samples_per_s_ci_w2``: the interval of every
    W = 2 samples/s ratio to DDP (:func:`w2_intervals`)."""
    w = max((r["W"] for r in agg), default=None)
    by = {(r["scenario"], r["mode"]): r for r in agg if r["W"] == w}
    dc, ps = by.get(("ln0.5", "dropcompute"), {}), by.get(("slow", "param-server"), {})
    w2 = {(r["scenario"], r["mode"]): r for r in agg if r["W"] == 2}
    dc2, ps2 = w2.get(("slow", "dropcompute"), {}), w2.get(("slow", "param-server"), {})
    errs = [r["pred_error_samples_per_s"] for (_, mode), r in w2.items()
            if mode in ("ddp", "dropcompute") and r.get("pred_error_samples_per_s") is not None]
    return {"dropcompute_over_ddp_samples_per_s": dc.get("x_ddp_samples_per_s"),
            "dropcompute_drop_rate": dc.get("drop_rate"),
            "dropcompute_over_ddp_time_to_target": dc.get("x_ddp_time_to_target"),
            "param_server_over_ddp_slow_rank": ps.get("x_ddp_samples_per_s"),
            "dropcompute_over_ddp_samples_per_s_slow_w2": dc2.get("x_ddp_samples_per_s"),
            "dropcompute_over_ddp_time_to_target_slow_w2": dc2.get("x_ddp_time_to_target"),
            "dropcompute_drop_rate_slow_w2": dc2.get("drop_rate"),
            "prediction_error_samples_per_s_max": max(errs) if errs else None,
            "param_server_over_ddp_samples_per_s_slow_w2": ps2.get("x_ddp_samples_per_s"),
            "curve_seeds": curve_seeds, "x_ddp_samples_per_s_ci_w2": w2_intervals(agg)}


def recompute_intervals(res: dict[str, Any], command: str) -> dict[str, Any]:
    """A result this script wrote, with the bootstrap intervals recomputed from its stored runs (``rows``) and
    no training: each aggregate row gets ``x_ddp_samples_per_s_ci``, the summary ``x_ddp_samples_per_s_ci_w2``,
    ``table_markdown`` is rendered again; every measured number stays as it was. ``provenance.recomputed``
    records what was recomputed, by ``command``, when and at which commit. Changes ``res`` in place.

    Raises:
        ValueError: no runs or no aggregate, an aggregate row without its runs, or a stored samples/s ratio to
            DDP that its runs do not give (the rows and the aggregate would be misaligned); each names the row.
    """
    if not res.get("rows") or not res.get("aggregate"):
        raise ValueError("--from-json: the result has no 'rows' (per-seed runs) or no 'aggregate'")
    groups = _groups(res["rows"])
    for a in res["aggregate"]:
        key = (a["W"], a["scenario"], a["mode"])
        if key not in groups:
            raise ValueError(f"--from-json: aggregate row W={key[0]} {key[1]} {key[2]} has no runs in 'rows'")
        if a["mode"] == "ddp":
            continue
        ddp = groups.get((a["W"], a["scenario"], "ddp"), [])
        means = [_mean([r.get("microbatches_per_s") for r in rs if "error" not in r]) for rs in (groups[key], ddp)]
        if a.get("x_ddp_samples_per_s") is not None and means[0] and means[1] and \
                abs(means[0] / means[1] - a["x_ddp_samples_per_s"]) > 1e-9 * a["x_ddp_samples_per_s"]:
            raise ValueError(f"--from-json: aggregate row W={key[0]} {key[1]} {key[2]}: x DDP "
                             f"{a['x_ddp_samples_per_s']} but its runs give {means[0] / means[1]}")
        a["x_ddp_samples_per_s_ci"] = ratio_interval(groups[key], ddp)
    res["summary"]["x_ddp_samples_per_s_ci_w2"] = w2_intervals(res["aggregate"])
    res["table_markdown"] = table(res["aggregate"], res["summary"], res["goals"])
    prov = res.setdefault("provenance", {})
    prov["recomputed"] = [x for x in prov.get("recomputed", []) if x.get("what") != "x_ddp_samples_per_s_ci"] + [
        {"what": "x_ddp_samples_per_s_ci",
         "how": "paired bootstrap intervals of the samples/s ratios to DDP, recomputed from the stored per-seed runs "
                "('rows') without training; every other number is as measured by the command above",
         "command": command, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
         "git_commit": git_commit()}]
    return res


def goals(summ: dict[str, Any]) -> dict[str, str]:
    """``met`` / ``missed`` / ``not measured`` per goal of :data:`GOALS`."""
    out = {}
    for k, (op, bound) in GOALS.items():
        v = summ.get(k)
        out[k] = "not measured" if v is None else ("met" if (v >= bound if op == ">=" else v <= bound) else "missed")
    return out


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _pred(meas: Any, pred: Any, fmt: str) -> str:
    """``measured (predicted)``, or the measured value alone when there is no prediction."""
    return _f(meas, fmt) + (f" ({_f(pred, fmt)})" if pred is not None else "")


def _ci(ci: dict[str, Any] | None) -> str:
    """`` [low, high]`` of a :func:`ratio_interval`, or nothing."""
    return f" [{ci['low']:.2f}, {ci['high']:.2f}]" if ci else ""


def table(agg: list[dict[str, Any]], summ: dict[str, Any], gl: dict[str, str]) -> str:
    """Markdown table of the per-row numbers (measured, with the model's prediction in brackets where there is
    one; the samples/s ratio to DDP with its paired bootstrap interval over seeds where there are >= 2) plus the
    goal lines."""
    head = ("| W | scenario | mode | seeds (curves) | samples/s (pred.) | x DDP [95% CI] | drop rate (pred.) | tau ms "
            "| overshoot ms, slowest rank (pred.) | staleness mean/max | delay share | time to target s | x DDP (time) "
            "| dev loss at DDP's time to target |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in agg:
        dc = r["mode"].startswith("dropcompute")
        stale = f"{_f(r['staleness_mean'])}/{_f(r['staleness_max'], '{:.0f}')}" if r["mode"] == "param-server" else "-"
        ttt = _f(r["time_to_target_s"], "{:.1f}") if r["time_to_target_s"] else f"not reached ({r['reached_target']}/{r['curve_seeds']})"
        w = f"{r['W']} (oversubscribed)" if r.get("oversubscribed") else str(r["W"])
        over = "-"
        if dc and r.get("tau_s"):
            po = r.get("pred_overshoot_s")
            over = _pred(r["overshoot_s_slowest"] * 1000 if r.get("overshoot_s_slowest") is not None else None,
                         po * 1000 if po is not None else None, "{:.0f}")
        lines.append(f"| {w} | {r['scenario']} | {r['mode']} | {r['seeds']} ({r['curve_seeds']}) "
                     f"| {_pred(r['samples_per_s'], r.get('pred_samples_per_s'), '{:.1f}')} "
                     f"| {_f(r.get('x_ddp_samples_per_s'))}{_ci(r.get('x_ddp_samples_per_s_ci'))} "
                     f"| {_pred(r['drop_rate'], r.get('pred_drop_rate'), '{:.3f}') if dc else '-'} "
                     f"| {_f(r['tau_s'] * 1000 if r['tau_s'] else None, '{:.0f}')} | {over} | {stale} "
                     f"| {_f(r['delay_share'])} | {ttt} | {_f(r.get('x_ddp_time_to_target'))} "
                     f"| {_f(r.get('dev_loss_at_ddp_time_to_target'), '{:.3f}')} |")
    lines.append("")
    for k, (op, bound) in GOALS.items():
        lines.append(f"* `{k}` = {_f(summ.get(k), '{:.3f}')} (goal {op} {bound}): {gl[k]}")
    for k in REPORTED:
        lines.append(f"* `{k}` = {_f(summ.get(k), '{:.3f}')} (reported, no goal)")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], targets: dict[int, float], path: Path) -> None:
    """Dev loss against training seconds, first seed of each run, one panel per (W, scenario)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["W"], r["scenario"]) for r in rows if r["mode"] != "none"})
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(4.5 * max(1, len(panels)), 3.6), squeeze=False)
    for ax, (w, scen) in zip(axes[0], panels):
        for r in rows:
            if (r["W"], r["scenario"]) == (w, scen) and "curve" in r and r["seed"] == min(
                    x["seed"] for x in rows if (x["W"], x["scenario"], x["mode"]) == (w, scen, r["mode"])):
                t, loss = zip(*r["curve"]) if r["curve"] else ((), ())
                ax.plot(t, loss, marker=".", label=r["mode"])
        if w in targets:
            ax.axhline(targets[w], color="grey", linestyle=":", label="target")
        ax.set_title(f"W={w}, {scen}")
        ax.set_xlabel("training seconds")
        ax.set_ylabel("dev loss")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="W=2, slow rank, 1 seed, tiny model, few updates (CI)")
    p.add_argument("--data", default="/work/exp/synthetic/data", help="DATA directory (synthetic corpus)")
    p.add_argument("--config", default=str(REPO / "recipes/synthetic/conf/train_xs.yaml"), help="training config")
    p.add_argument("--workers", default=None, help="comma-separated W list (default 2,4; quick 2)")
    p.add_argument("--scenarios", default=None, help=f"comma-separated subset of {list(SCENARIOS)} (quick: slow)")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"comma-separated subset of {list(MODES + CONTROL_MODES)}; dropcompute-inf is a control: "
                        "DropCompute with tau = inf (never drops), which separates the gain from dropping from the "
                        "cost of the all-reduce implementation")
    p.add_argument("--seeds", type=int, default=None, help="seeds per configuration (default 3; quick 1)")
    p.add_argument("--oversubscribed-seeds", type=int, default=None,
                   help="seeds per configuration where the W ranks outnumber the cores (default: --seeds)")
    p.add_argument("--updates", type=int, default=None,
                   help="updates of a curve run (dev loss vs time; default 60; quick 6)")
    p.add_argument("--valid-every", type=int, default=None,
                   help="validation interval of a curve run, in updates (default 2, so the target crossing is "
                        "resolved; validation time is not on the training clock)")
    p.add_argument("--curve-seeds", type=int, default=None,
                   help="the first N seeds are curve runs (time to target, plot); the others are shorter "
                        "throughput runs (default: every seed is a curve run)")
    p.add_argument("--throughput-updates", type=int, default=None,
                   help="updates of a throughput run (default: --updates)")
    p.add_argument("--log-every", type=int, default=None,
                   help="log interval in updates, the throughput windows; must divide --valid-every "
                        "(default: --valid-every)")
    p.add_argument("--update-freq", type=int, default=2, help="M micro-batches per data rank per update")
    p.add_argument("--max-tokens", type=int, default=None, help="padded frames per micro-batch (default 4000; quick 1500)")
    p.add_argument("--auto-steps", type=int, default=None, help="DropCompute auto-tau recording steps (default 5; quick 2)")
    p.add_argument("--auto-warmup-steps", type=int, default=None,
                   help="DropCompute auto-tau: updates run before the recorded ones and not recorded (default 5, as the "
                        "paper's reference code; quick 0)")
    p.add_argument("--tiny", action="store_true", help="tiny model overrides (implied by --quick)")
    p.add_argument("--train-overrides", default="",
                   help="extra mmst-train key=value overrides of every run, space-separated (e.g. on one GPU: "
                        "'device=cuda distributed.options.backend=gloo')")
    p.add_argument("--valid-utterances", type=int, default=0,
                   help="validate on the first N dev utterances only (0 = the whole dev split)")
    p.add_argument("--dist-timeout", type=float, default=120.0, help="--dist-timeout of every run (s)")
    p.add_argument("--run-timeout", type=float, default=900.0, help="wall-clock bound of one run (s)")
    p.add_argument("--launcher", choices=("torchrun", "direct"), default="torchrun",
                   help="how a distributed run starts its ranks: torchrun, or direct (the ranks as plain processes "
                        "with torchrun's environment variables, no agent process: one interpreter start fewer per "
                        "run; the test suite's smoke run)")
    p.add_argument("--resume", action="store_true",
                   help="reuse the finished runs recorded in OUT.rows.jsonl by an earlier, interrupted or partly "
                        "failed invocation with the same settings (runs that failed are run again)")
    p.add_argument("--from-json", default=None, metavar="JSON",
                   help="train nothing: recompute the bootstrap intervals of JSON (a result of this script) from "
                        "its stored per-seed runs, render its table again and rewrite JSON and its .md in place "
                        "(provenance.recomputed records it)")
    p.add_argument("--out", default=str(RESULTS_DIR / "stragglers_mmst.json"), help="JSON output")
    p.add_argument("--plot", default=str(REPO / "docs/images/stragglers_mmst.png"), help="plot output")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI: run the benchmark, print the table, write JSON, Markdown and plot."""
    p = build_parser()
    a = p.parse_args(argv)
    if a.from_json:
        path = Path(a.from_json)
        try:
            res = recompute_intervals(json.loads(path.read_text()), shlex.join(
                ["python", "bench/bench_stragglers_mmst.py", *(sys.argv[1:] if argv is None else argv)]))
        except (OSError, ValueError, KeyError) as e:
            p.error(f"{path}: {e!r}" if isinstance(e, KeyError) else f"{path}: {e}")
        print(res["table_markdown"])
        path.write_text(json.dumps(res, indent=1, default=str))
        page = path.with_suffix(".md")  # keep its Stale line (tools/render_docs.py): the runs are as old as before
        status = re.match(r"\*\*(?:Stale|Superseded):\*\* [^\n]*\n\n", page.read_text()) if page.is_file() else None
        page.write_text((status[0] if status else "") + res["table_markdown"] + "\n")
        print(f"wrote {path}, {path.with_suffix('.md')}", file=sys.stderr)
        return 0
    q = a.quick
    a.tiny = a.tiny or q
    ws = [int(x) for x in (a.workers or ("2" if q else "2,4")).split(",")]
    scens = (a.scenarios or ("slow" if q else ",".join(SCENARIOS))).split(",")
    modes = a.modes.split(",")
    if set(modes) - set(MODES + CONTROL_MODES):
        p.error(f"--modes: unknown {sorted(set(modes) - set(MODES + CONTROL_MODES))}; known: {list(MODES + CONTROL_MODES)}")
    seeds = range(1, 1 + (a.seeds or (1 if q else 3)))
    a.updates = a.updates or (6 if q else 60)
    a.valid_every = a.valid_every or 2
    a.log_every = a.log_every or a.valid_every
    a.curve_seeds = len(seeds) if a.curve_seeds is None else a.curve_seeds
    if a.curve_seeds < 1:
        p.error("--curve-seeds must be >= 1 (the reference run and the plot need a curve run)")
    a.throughput_updates = a.throughput_updates or a.updates
    if a.valid_every % a.log_every or a.throughput_updates % a.log_every or a.throughput_updates < 2 * a.log_every:
        p.error("--log-every must divide --valid-every and --throughput-updates, with two windows per throughput run")
    a.max_tokens = a.max_tokens or (1500 if q else 4000)
    a.auto_steps = a.auto_steps or (2 if q else 5)
    if a.auto_warmup_steps is None:
        a.auto_warmup_steps = 0 if q else 5
    start = a.auto_warmup_steps + a.auto_steps
    first = -(-start // a.log_every) * a.log_every  # first measured window starts here
    if first + a.log_every > min(a.throughput_updates, a.updates):
        p.error(f"runs too short: throughput is measured from update {start} (--auto-warmup-steps + --auto-steps) on, "
                "in windows of "
                f"--log-every {a.log_every}; train at least {first + a.log_every} updates")
    t0 = time.time()
    record = run_record(depends_on=DEPENDS_ON)
    rows: list[dict[str, Any]] = []
    targets: dict[int, float] = {}
    done_rows = Path(a.out).with_suffix(".rows.jsonl")  # finished runs, one JSON per line (--resume)
    done: dict[tuple, dict[str, Any]] = {}
    if a.resume and done_rows.is_file():
        for r in map(json.loads, done_rows.read_text().splitlines()):
            if "error" not in r:
                done[(r["W"], r["scenario"], r["mode"], r["seed"])] = r
        print(f"--resume: {len(done)} finished runs from {done_rows}", file=sys.stderr)
    elif done_rows.is_file():
        done_rows.unlink()

    def run_or_reuse(w: int, mode: str, scen: str | None, seed: int, root: Path) -> dict[str, Any]:
        r = done.get((w, scen, mode, seed))
        if r is None:
            r = run_one(a, w, mode, scen, seed, root)
            with done_rows.open("a") as fh:
                fh.write(json.dumps(r, default=str) + "\n")
        return r

    data_arg = a.data
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if a.valid_utterances > 0:
            a.data = _valid_subset_view(Path(a.data), a.valid_utterances, root)
        for w in ws:
            ref = run_or_reuse(w, "none", None, 1, root)
            rows.append(ref)
            if "error" in ref:
                print(f"W={w} reference run failed: {ref['error']}", file=sys.stderr)
            else:
                targets[w] = reference_target(ref["curve"], ref["curve_updates"])
            for scen in scens:
                for mode in modes:
                    over = w > (os.cpu_count() or 1) and a.oversubscribed_seeds is not None
                    for seed in (seeds[:a.oversubscribed_seeds] if over else seeds):
                        r = run_or_reuse(w, mode, scen, seed, root)
                        rows.append(r)
                        print(f"W={w} {scen} {mode} seed {seed}: {r['wall_s']:.0f}s"
                              + (f" ERROR {r['error']}" if "error" in r else ""), file=sys.stderr, flush=True)
    # the single-process runs see the whole epoch (distributed ranks log their shard's batch count)
    spm = _mean([r.get("samples_per_microbatch") for r in rows if r["mode"] == "none"]) or 1.0
    cores = os.cpu_count() or 1
    agg = aggregate(rows, targets, spm, cores, a.update_freq)
    summ = summary(agg, a.curve_seeds)
    gl = goals(summ)
    tab = table(agg, summ, gl)
    print(tab)
    out = {"summary": summ, "goals": gl, "provenance": finish_record(record),
           "config": {**{k: v for k, v in vars(a).items()}, "data": str(data_arg), "workers": ws, "scenarios": scens, "modes": modes,
                      "seeds": list(seeds),
                      "oversubscribed_seeds": a.oversubscribed_seeds, "samples_per_microbatch": spm,
                      "ranks_per_core": {w: (w + 1) / cores for w in ws}, "cores": cores,
                      "target_rule": "the single-process reference run's dev loss at its first validation at or "
                                     "after 2/3 of its updates; the same target for every mode",
                      "time_to_target": "linear interpolation of the crossing between validations, validation "
                                        "time excluded; median over the curve seeds"},
           "targets": targets, "runtime_s": time.time() - t0,
           "runs_wall_s": sum(float(r["wall_s"]) for r in rows), "aggregate": agg, "rows": rows,
           "table_markdown": tab}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    Path(a.out).with_suffix(".md").write_text(tab + "\n")
    plot(rows, targets, Path(a.plot))
    print(f"wrote {a.out}, {Path(a.out).with_suffix('.md')}, {a.plot} in {time.time() - t0:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
