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

DropCompute with threshold tau (Giladi et al. 2023, Sec. 4.2): worker n contributes the micro-batches
that finish by tau, ``Mtilde_n = #{m : T_n^(m) <= tau}``; the step takes ``min(tau, max_n T_n) + T_c``::

    drop_rate(tau) = 1 - E[sum_n Mtilde_n] / (N M)                                             (4)
    E[T_dc(tau)]   = E[min(tau, max_n T_n)] + T_c                                              (5)
    S_eff(tau)     = E[sum_n Mtilde_n] / E[T_dc(tau)]     (effective micro-batches per second)  (6)

:func:`choose_tau` maximises (6) (optionally subject to ``drop_rate <= max_drop_rate``), evaluated by
Monte Carlo over the measured per-micro-batch times.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


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
                             n_sims: int = 4000, seed: int = 0, sims: np.ndarray | None = None) -> dict[str, float]:
    """Expected DropCompute step time, drop rate and effective speed for threshold ``tau`` (Eq. 4-6).

    Returns:
        dict with ``step_s`` (Eq. 5), ``drop_rate`` (Eq. 4), ``speed`` (Eq. 6, micro-batches/s),
        ``sync_step_s`` (Eq. 1, tau = inf) and ``speedup`` = speed / speed(tau=inf).
    """
    if sims is None:
        sims = simulate(micro_times, n_workers, m, n_sims, seed)
    return _dc_from_cum(np.cumsum(sims, axis=2), tau, comm_s)


def _dc_from_cum(cum: np.ndarray, tau: float, comm_s: float) -> dict[str, float]:
    """Eq. 4-6 from simulated partial sums ``cum`` (n_sims, N, M)."""
    n_workers, m = cum.shape[1], cum.shape[2]
    done = (cum <= tau).sum(axis=(1, 2)).mean()
    tmax = cum[:, :, -1].max(axis=1)
    step = float(np.minimum(tau, tmax).mean() + comm_s)
    sync = float(tmax.mean() + comm_s)
    speed = float(done / step)
    base = n_workers * m / sync
    return {"tau_s": float(tau), "step_s": step, "drop_rate": float(1 - done / (n_workers * m)),
            "speed": speed, "sync_step_s": sync, "speedup": speed / base}


def choose_tau(micro_times: Any, comm_s: float = 0.0, n_workers: int | None = None, m: int | None = None,
               max_drop_rate: float | None = None, n_sims: int = 2000, n_grid: int = 200,
               seed: int = 0) -> dict[str, float]:
    """Threshold maximising the expected effective speed S_eff(tau) (Eq. 6; DropCompute Sec. 4.2).

    Args:
        micro_times: measured times ``(N, S, M)`` (rank, step, micro-batch; NaN = not run) or any form
            accepted by :func:`sample_pools`.
        comm_s: T_c, seconds. n_workers / m: default from the array shape.
        max_drop_rate: optional constraint on Eq. 4 (None = unconstrained, as in the paper).
        n_sims: Monte-Carlo steps. n_grid: candidate thresholds (quantiles of the simulated step maxima
            and a uniform grid between the median first partial sum and the largest total); all are
            evaluated at once from sorted partial sums (O(n log n)).

    Returns:
        ``dropcompute_expectations`` of the best tau (``tau_s``, ``step_s``, ``drop_rate``, ``speed``,
        ``sync_step_s``, ``speedup``); ``tau_s = inf`` when no finite tau beats synchronous training.
        With ``max_drop_rate`` also ``unconstrained_tau_s``, ``unconstrained_drop_rate``,
        ``unconstrained_speedup`` (the paper's pure argmax).
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
    # all candidates at once (sorted partial sums / maxima): done(tau) and E[min(tau, max_n T_n)]
    k = cum.shape[0]
    done = np.searchsorted(np.sort(cum.ravel()), taus, side="right") / k
    j = np.searchsorted(tmax, taus, side="right")
    prefix = np.concatenate([[0.0], np.cumsum(tmax)])
    step = (prefix[j] + (k - j) * taus) / k + comm_s
    speed = done / step
    drop = 1.0 - done / (n_workers * m)
    ok = np.ones_like(speed, dtype=bool) if max_drop_rate is None else drop <= max_drop_rate + 1e-12
    free = _dc_from_cum(cum, math.inf, comm_s)
    best = dict(free)
    if speed.size and speed.max() > free["speed"]:
        free = _dc_from_cum(cum, float(taus[int(speed.argmax())]), comm_s)
    if ok.any() and speed[ok].max() > best["speed"]:
        best = _dc_from_cum(cum, float(taus[ok][int(speed[ok].argmax())]), comm_s)
    if max_drop_rate is not None:
        best = {**best, **{f"unconstrained_{k_}": v for k_, v in free.items() if k_ in ("tau_s", "drop_rate", "speedup")}}
    return best
