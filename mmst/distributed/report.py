"""Numbers of one ``mmst-train --distributed ...`` run, read back from its ``train_log.jsonl``.

Used by ``bench/bench_stragglers_mmst.py`` to compare DDP, DropCompute and the parameter server on the
real model. Works on the records the trainer writes (``kind`` ``train`` / ``valid`` / ``event``) with the
per-log-interval numbers of :mod:`mmst.training.distributed` (``dc_*``, ``ddp_*``, ``ps_*``); it imports
nothing from :mod:`mmst.training`.

Definitions (one update = ``W x M`` nominal micro-batches in every mode, see
:mod:`mmst.training.distributed`):

* micro-batches used in a log window = ``updates x W x M x (1 - drop rate)`` (drop rate 0 for DDP and
  the parameter server);
* throughput = micro-batches used / training seconds (``train_time_s``: validation excluded), over every
  log window but the first (which holds start-up and DropCompute's ``auto`` recording);
* dev-loss curve = ``(train_time_s, valid loss)`` at each validation (the log interval must divide the
  validation interval, so each validation has a train record at the same update);
* time to target = the training seconds at which the dev-loss curve first crosses the target, linearly
  interpolated between the validation before and the first validation at or below it (validation time
  is not on the clock); the loss at a given training time is interpolated the same way;
* the model's predictions, when ``--compute-threshold auto`` chose a threshold: the ``tau_info`` event
  (:func:`mmst.distributed.straggler_model.choose_tau`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``train_log.jsonl``.

    Raises:
        FileNotFoundError: no such file. ValueError: a line that is not JSON (names file and line).
    """
    out = []
    p = Path(path)
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{i}: not a JSON record ({e})") from e
    return out


def dev_curve(records: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """``[(training seconds, dev loss)]`` at each validation that has a train record at the same update."""
    t_at = {r["update"]: float(r["train_time_s"]) for r in records if r.get("kind") == "train"}
    return [(t_at[r["update"]], float(r["loss"])) for r in records
            if r.get("kind") == "valid" and r["update"] in t_at and "loss" in r]


def time_to_target(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """Training seconds at which ``curve`` first reaches ``target``: linear interpolation between the last
    point above the target and the first point at or below it (that point's time when it is the first
    point). None if never reached.

    Args:
        curve: ``[(training seconds, dev loss)]`` in training order.
    """
    prev: tuple[float, float] | None = None
    for t, loss in curve:
        if loss <= target:
            if prev is None or prev[1] == loss:
                return t
            t0, l0 = prev
            return t0 + (t - t0) * (l0 - target) / (l0 - loss)
        prev = (t, loss)
    return None


def loss_at_time(curve: Sequence[tuple[float, float]], t: float) -> float | None:
    """Dev loss of ``curve`` at training second ``t``, linearly interpolated between the validations around
    it; None when ``t`` lies before the first or after the last validation (not measured)."""
    for (t0, l0), (t1, l1) in zip(curve, curve[1:]):
        if t0 <= t <= t1:
            return l0 if t1 == t0 else l0 + (l1 - l0) * (t - t0) / (t1 - t0)
    if len(curve) == 1 and curve[0][0] == t:
        return curve[0][1]
    return None


def reference_target(curve: Sequence[tuple[float, float]], updates: Sequence[int], fraction: float = 2 / 3) -> float:
    """The target dev loss taken from a reference (single-process) run: its dev loss at the first
    validation at or after ``fraction`` of its updates (so the compared runs, which see as many samples
    by their end, have room to reach it).

    Args:
        curve: the reference run's :func:`dev_curve`. updates: the update of each curve point.

    Raises:
        ValueError: an empty curve, or ``curve`` and ``updates`` of different lengths.
    """
    if not curve or len(curve) != len(updates):
        raise ValueError("reference_target: need one update per dev-curve point (and at least one point)")
    last = max(updates)
    for (_, loss), u in zip(curve, updates):
        if u >= fraction * last:
            return loss
    return curve[-1][1]


def _mean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def run_summary(records: Sequence[dict[str, Any]], n_data_ranks: int, update_freq: int,
                measure_from: int = 0) -> dict[str, Any]:
    """Throughput, drop rate, staleness, delay share and dev curve of one run (module docstring).

    Args:
        records: :func:`read_log` of the run. n_data_ranks: W (ranks that compute gradients: all ranks in
            DDP / DropCompute, the workers of a parameter server). update_freq: M.
        measure_from: throughput, drop rate and overshoot count only the log windows that start at or after
            this update (besides never counting the first window), e.g. DropCompute's ``auto_steps``
            recording updates; use the same value for every mode.

    Returns:
        ``updates``, ``train_time_s``, ``microbatches_per_s``, ``drop_rate``, ``tau_s`` (DropCompute, last
        window; None = no threshold), ``staleness_mean``, ``staleness_max``, ``pushes_per_s``,
        ``delay_share`` (injected delay / busy time of a rank; None when not logged), ``curve``,
        ``curve_updates``, ``lost_workers``, ``overshoot_s_slowest`` (DropCompute, the slowest rank past tau,
        windows after the first), ``tau_info`` (the ``tau_info`` event's values, or None).

    Raises:
        ValueError: fewer than two train records (no window after the first).
    """
    train = [r for r in records if r.get("kind") == "train"]
    if len(train) < 2:
        raise ValueError(f"run_summary: {len(train)} train record(s); need >= 2 (lower logging.log_interval)")
    used, seconds, drops = 0.0, 0.0, []
    windows = [(prev, cur) for prev, cur in zip(train, train[1:]) if prev["update"] >= measure_from]
    if not windows:
        raise ValueError(f"run_summary: no log window starts at or after update {measure_from}; train longer")
    for prev, cur in windows:
        n = cur["update"] - prev["update"]
        drop = float(cur.get("dc_drop_rate", 0.0))
        drops.append(drop)
        used += n * n_data_ranks * update_freq * (1.0 - drop)
        seconds += float(cur["train_time_s"]) - float(prev["train_time_s"])
    last = train[-1]
    tau = last.get("dc_tau_s")
    meas = [cur for _, cur in windows]
    delay = [r["dc_delay_s"] / r["dc_compute_s"] for r in meas if r.get("dc_compute_s")]
    delay += [r["ddp_delay_s"] / r["ddp_step_s"] for r in meas if r.get("ddp_step_s")]
    curve = dev_curve(records)
    t_at = {r["update"] for r in train}
    return {
        "updates": int(last["update"]), "train_time_s": float(last["train_time_s"]),
        "microbatches_per_s": used / seconds if seconds > 0 else None,
        "drop_rate": _mean(drops) if any("dc_drop_rate" in r for r in train) else 0.0,
        "tau_s": (tau if tau is not None and tau > 0 else None),
        "staleness_mean": _mean([r.get("ps_staleness") for r in meas]),
        "staleness_max": max((r["ps_staleness_max"] for r in train if "ps_staleness_max" in r), default=None),
        "pushes_per_s": _mean([r.get("ps_pushes_per_s") for r in meas]),
        "delay_share": _mean(delay),
        "curve": curve,
        "curve_updates": [r["update"] for r in records if r.get("kind") == "valid" and r["update"] in t_at],
        "lost_workers": [e["worker_lost"] for e in records if e.get("kind") == "event" and "worker_lost" in e],
        "overshoot_s_slowest": _mean([r.get("dc_overshoot_s_slowest") for r in meas]),
        "tau_info": next((e["tau_info"] for e in records if e.get("kind") == "event" and "tau_info" in e), None),
    }


def paired_bootstrap_ratio(num: Sequence[float], den: Sequence[float], n_resamples: int = 10000, seed: int = 0,
                           level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of ``mean(num) / mean(den)`` by the paired bootstrap over runs (Efron & Tibshirani
    1993, ch. 13): each resample draws ``len(num)`` run indices with replacement, the same indices for both
    sequences (``num[i]`` and ``den[i]`` are runs of one seed), and takes the ratio of the resampled means.

    With n runs a resample is one of ``C(2n - 1, n)`` multisets of runs (10 for 3 seeds), so the interval is
    coarse for few seeds, and it can only widen, never narrow, the spread the runs show.

    Args:
        num, den: one number per seed (e.g. samples/s of a mode and of DDP), paired by position.
        n_resamples: bootstrap resamples. seed: seed of ``numpy.random.default_rng`` (fixed, so a rerun on the
            same numbers gives the same interval). level: coverage of the two-sided interval (0.95: the 2.5 and
            97.5 percentiles, numpy's linear interpolation).

    Returns:
        ``(low, high)``.

    Raises:
        ValueError: sequences of different lengths, fewer than 2 pairs, a resample whose ``den`` mean is 0, or
            ``level`` outside (0, 1).
    """
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired_bootstrap_ratio: {a.shape} numerators against {b.shape} denominators; "
                         "need one of each per seed")
    if len(a) < 2:
        raise ValueError(f"paired_bootstrap_ratio: {len(a)} pair(s); need >= 2 seeds")
    if not 0.0 < level < 1.0:
        raise ValueError(f"paired_bootstrap_ratio: level {level} outside (0, 1)")
    idx = np.random.default_rng(seed).integers(0, len(a), size=(n_resamples, len(a)))  # (B, n) run indices
    den_means = b[idx].mean(axis=1)
    if np.any(den_means == 0):
        raise ValueError("paired_bootstrap_ratio: a resample's denominator mean is 0")
    ratios = a[idx].mean(axis=1) / den_means  # (B,)
    low, high = np.quantile(ratios, [(1.0 - level) / 2, (1.0 + level) / 2])
    return float(low), float(high)
