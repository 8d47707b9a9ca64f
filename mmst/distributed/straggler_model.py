"""Analytic model of synchronous step time under compute variance, and DropCompute's threshold choice.

The runtime part: :func:`choose_tau` (``--compute-threshold auto``) and the Monte-Carlo expectations it
evaluates (Eq. 4-6). The step-time predictions of Eq. 1-3 (Monte Carlo and Blom), which the straggler
benchmark compares with measurements, are in :mod:`mmst.simulation.step_time`.

Notation: N workers, M micro-batches per worker per step, ``t_nm`` the time of micro-batch m on worker n
(seconds), ``T_n = sum_m t_nm`` the worker's compute, ``T_c`` the per-step overhead (all-reduce,
optimiser), ``T_n^(m) = sum_{i<=m} t_ni`` the partial sums.

Synchronous (DDP) step time::

    E[T_sync] = E[max_n T_n] + T_c                                                             (1)

* Monte Carlo: draw ``t_nm`` from the measured samples (per-rank pools when given per rank, so a
  persistent slow rank is kept) and average ``max_n T_n``.
* Blom's approximation of the expected maximum of N i.i.d. normals (Blom 1958; used for the same
  purpose in the DropCompute paper, Giladi et al. 2023, Sec. 4.1): with per-worker sum moments
  ``mu = M E[t]``, ``sigma = sqrt(M Var[t])``::

      E[max_n T_n] ~= mu + sigma * Phi^{-1}((N - 0.375) / (N + 0.25))                           (2)

Scaling efficiency of N workers against N x one worker (same per-worker batch)::

    eff(N) = E[T_1 step] / E[T_N step]                                                         (3)

DropCompute with threshold tau (Giladi et al. 2023, Sec. 4.2, Alg. 1), with the checks where the
implementation can make them: before each micro-batch and between its forward and backward. Let
``phi`` be the share of a micro-batch's time spent before that second check (forward, plus any
injected delay), so micro-batch m of worker n passes its check at ``F_nm = T_n^(m-1) + phi t_nm``. It
is computed (its backward runs to the end, even past tau) iff ``F_nm < tau``; the worker stops at its
first check point at or past tau, ``stop_n = min({c in C_n : c >= tau} U {T_n})`` with
``C_n = {T_n^(m-1), F_nm : m = 1..M}``. With ``Mtilde_n = #{m : F_nm < tau}``::

    drop_rate(tau) = 1 - E[sum_n Mtilde_n] / (N M)                                             (4)
    E[T_dc(tau)]   = E[max_n stop_n] + T_c                                                     (5)
    S_eff(tau)     = E[sum_n Mtilde_n] / E[T_dc(tau)]     (effective micro-batches per second)  (6)
    overshoot(tau) = E[max_n stop_n] - E[min(tau, max_n T_n)]                                  (7)

The paper's idealised model (a worker stops exactly at tau and keeps every micro-batch finished by
then) is the limit of zero-length forward phases; it caps the step at tau and so flatters DropCompute
when single micro-batches are long or slow. :func:`choose_tau` maximises (6) (optionally subject to
``drop_rate <= max_drop_rate``), evaluated by Monte Carlo over the measured per-micro-batch times.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: ``phi`` when nothing was measured: forward about a third of a micro-batch, plus part of a delay.
DEFAULT_FWD_FRACTION = 0.5


def sample_pools(micro_times: Any, n_workers: int) -> list[np.ndarray]:
    """Per-worker sample pools from ``micro_times``: a flat array (shared pool, i.i.d. workers), or a
    list/array indexed by rank first ``(R, ...)`` (per-rank pools; with R != n_workers, worker n uses
    pool ``n % R``). NaNs (dropped micro-batches) are ignored.

    Raises:
        ValueError: an empty pool.
    """
    if isinstance(micro_times, (list, tuple)) and micro_times and np.ndim(micro_times[0]) >= 1:
        pools = [np.asarray(p, dtype=float).ravel() for p in micro_times]
    else:
        arr = np.asarray(micro_times, dtype=float)
        pools = [arr.ravel()] if arr.ndim <= 1 else [a.ravel() for a in arr]
    pools = [p[np.isfinite(p)] for p in pools]
    if any(p.size == 0 for p in pools):
        raise ValueError("straggler model: a worker has no measured micro-batch times")
    return [pools[n % len(pools)] for n in range(n_workers)]


def simulate(micro_times: Any, n_workers: int, m: int, n_sims: int = 4000, seed: int = 0) -> np.ndarray:
    """Monte-Carlo draws of micro-batch times, shape ``(n_sims, n_workers, m)`` (seconds), resampled
    with replacement from each worker's pool (see :func:`sample_pools`)."""
    rng = np.random.default_rng(seed)
    pools = sample_pools(micro_times, n_workers)
    out = np.empty((n_sims, n_workers, m))
    for n, p in enumerate(pools):
        out[:, n, :] = rng.choice(p, size=(n_sims, m), replace=True)
    return out


def dropcompute_expectations(micro_times: Any, n_workers: int, m: int, tau: float, comm_s: float = 0.0,
                             n_sims: int = 4000, seed: int = 0, sims: np.ndarray | None = None,
                             fwd_fraction: float = DEFAULT_FWD_FRACTION) -> dict[str, float]:
    """Expected DropCompute step time, drop rate, effective speed and overshoot for threshold ``tau``
    (Eq. 4-7).

    Args:
        fwd_fraction: ``phi``, the share of each micro-batch's time before the forward/backward check.

    Returns:
        dict with ``step_s`` (Eq. 5), ``drop_rate`` (Eq. 4), ``speed`` (Eq. 6, micro-batches/s),
        ``overshoot_s`` (Eq. 7), ``sync_step_s`` (Eq. 1, tau = inf) and ``speedup`` = speed / speed(inf).
    """
    if sims is None:
        sims = simulate(micro_times, n_workers, m, n_sims, seed)
    return _dc_eval(sims, np.cumsum(sims, axis=2), tau, comm_s, fwd_fraction)



def _dc_eval(sims: np.ndarray, cum: np.ndarray, tau: float, comm_s: float, phi: float) -> dict[str, float]:
    """Eq. 4-7 from simulated micro-batch times ``sims`` and their partial sums ``cum`` (n_sims, N, M)."""
    n_workers, m = cum.shape[1], cum.shape[2]
    prev = cum - sims
    mid = prev + phi * sims
    tmax = cum[:, :, -1].max(axis=1)
    sync = float(tmax.mean() + comm_s)
    if math.isfinite(tau):
        done = (mid < tau).sum(axis=(1, 2)).mean()
        checks = np.concatenate([prev, mid], axis=2)
        first_past = np.where(checks >= tau, checks, np.inf).min(axis=2)
        stop = np.minimum(first_past, cum[:, :, -1]).max(axis=1)
    else:
        done, stop = float(n_workers * m), tmax
    stop_mean = float(stop.mean())
    step = stop_mean + comm_s
    speed = float(done / step)
    base = n_workers * m / sync
    return {"tau_s": float(tau), "step_s": step, "drop_rate": float(1 - done / (n_workers * m)),
            "speed": speed, "overshoot_s": stop_mean - float(np.minimum(tau, tmax).mean()),
            "sync_step_s": sync, "speedup": speed / base}


def choose_tau(micro_times: Any, comm_s: float = 0.0, n_workers: int | None = None, m: int | None = None,
               max_drop_rate: float | None = None, n_sims: int = 1000, n_grid: int = 100,
               seed: int = 0, fwd_fraction: float = DEFAULT_FWD_FRACTION) -> dict[str, float]:
    """Threshold maximising the expected effective speed S_eff(tau) (Eq. 6; DropCompute Sec. 4.2).

    Args:
        micro_times: measured times ``(N, S, M)`` (rank, step, micro-batch; NaN = not run) or any form
            accepted by :func:`sample_pools`.
        comm_s: T_c, seconds. n_workers / m: default from the array shape.
        max_drop_rate: optional constraint on Eq. 4 (None = unconstrained, as in the paper).
        n_sims: Monte-Carlo steps. n_grid: candidate thresholds (quantiles of the simulated step maxima
            and a uniform grid between the median first partial sum and the largest total).
        fwd_fraction: ``phi`` of Eq. 4-7 (share of a micro-batch before its forward/backward check).

    Returns:
        ``dropcompute_expectations`` of the best tau (``tau_s``, ``step_s``, ``drop_rate``, ``speed``,
        ``overshoot_s``, ``sync_step_s``, ``speedup``); ``tau_s = inf`` when no finite tau beats
        synchronous training. With ``max_drop_rate`` also ``unconstrained_tau_s``,
        ``unconstrained_drop_rate``, ``unconstrained_speedup`` (the paper's pure argmax).
    """
    arr = np.asarray(micro_times, dtype=float)
    if n_workers is None:
        n_workers = arr.shape[0] if arr.ndim == 3 else 1
    if m is None:
        m = arr.shape[-1] if arr.ndim >= 2 else 1
    sims = simulate(arr if arr.ndim == 3 else micro_times, n_workers, m, n_sims, seed)
    cum = np.cumsum(sims, axis=2)
    lo, hi = float(np.quantile(cum[:, :, 0], 0.5)), float(cum[:, :, -1].max())
    tmax = np.sort(cum[:, :, -1].max(axis=1))
    taus = np.unique(np.concatenate([np.quantile(tmax, np.linspace(0.0, 1.0, n_grid)), np.linspace(lo, hi, n_grid)]))
    free = best = _dc_eval(sims, cum, math.inf, comm_s, fwd_fraction)
    for tau in taus:
        r = _dc_eval(sims, cum, float(tau), comm_s, fwd_fraction)
        if r["speed"] > free["speed"]:
            free = r
        if (max_drop_rate is None or r["drop_rate"] <= max_drop_rate + 1e-12) and r["speed"] > best["speed"]:
            best = r
    if max_drop_rate is not None:
        best = {**best, **{f"unconstrained_{k_}": v for k_, v in free.items() if k_ in ("tau_s", "drop_rate", "speedup")}}
    return best


def estimate_comm_s(micro_times: Any, comm_s: Any) -> float:
    """T_c for :func:`choose_tau` from S recorded synchronous steps: the median over steps of the
    all-reduce time of the rank that arrived last (it waited least, so its time is the closest to pure
    communication). The median, not the minimum: the minimum of S noisy times is biased low, which makes
    every threshold look cheaper than it is.

    Args:
        micro_times: ``(N, S, M)`` recorded micro-batch times (NaN = not run). comm_s: ``(N, S)`` all-reduce
            times of each rank in each step (seconds).

    Raises:
        ValueError: shapes that do not match.
    """
    t = np.asarray(micro_times, dtype=float)
    c = np.asarray(comm_s, dtype=float)
    if t.ndim != 3 or c.shape != t.shape[:2]:
        raise ValueError(f"estimate_comm_s: micro_times (N,S,M) and comm_s (N,S) expected, got {t.shape}, {c.shape}")
    last = np.nansum(t, axis=2).argmax(axis=0)  # (S,) the rank that finished its compute last
    return float(np.median(c[last, np.arange(c.shape[1])]))
