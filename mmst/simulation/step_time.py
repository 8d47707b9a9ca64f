"""Predicted synchronous step time and scaling efficiency (Eq. 1-3 of :mod:`mmst.distributed.straggler_model`).

Validation code for the analytic straggler model: ``bench/bench_stragglers.py`` compares these
predictions with measured step times. Nothing in the training runtime uses them.

* Monte Carlo: draw ``t_nm`` from the measured samples (per-rank pools when given per rank, so a
  persistent slow rank is kept) and average ``max_n T_n``.
* Blom's approximation of the expected maximum of N i.i.d. normals (Blom 1958; used for the same
  purpose in the DropCompute paper, Giladi et al. 2023, Sec. 4.1): with per-worker sum moments
  ``mu = M E[t]``, ``sigma = sqrt(M Var[t])``::

      E[max_n T_n] ~= mu + sigma * Phi^{-1}((N - 0.375) / (N + 0.25))                           (2)
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from mmst.distributed.straggler_model import (
    DEFAULT_FWD_FRACTION,
    dropcompute_expectations,
    sample_pools,
    simulate,
)


def blom_quantile(n: int) -> float:
    """``Phi^{-1}((n - 0.375)/(n + 0.25))``: E[max of n standard normals] by Blom's formula (0 for n=1).

    Raises:
        ValueError: n < 1.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    if n == 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def expected_max_sum_mc(micro_times: Any, n_workers: int, m: int, n_sims: int = 4000, seed: int = 0) -> float:
    """E[max_n sum_m t_nm] by Monte Carlo (Eq. 1 without T_c), seconds."""
    sims = simulate(micro_times, n_workers, m, n_sims, seed)
    return float(sims.sum(axis=2).max(axis=1).mean())


def expected_max_sum_blom(micro_times: Any, n_workers: int, m: int) -> float:
    """E[max_n sum_m t_nm] by Blom's approximation (Eq. 2) with pooled moments, seconds.

    Per-worker moments: ``mu = M mean(t)``, ``sigma = sqrt(M var(t))``. With per-rank pools of
    different means (a slow rank) the i.i.d. assumption fails; the result is then
    ``max(max_n mu_n, mu + sigma q_N)`` as a crude bound - prefer Monte Carlo there.
    """
    pools = sample_pools(micro_times, n_workers)
    allt = np.concatenate(pools)
    mu, sigma = m * allt.mean(), math.sqrt(m * allt.var())
    est = mu + sigma * blom_quantile(n_workers)
    return float(max(est, max(m * p.mean() for p in pools)))


def predict(micro_times: Any, n_workers: int, m: int, comm_s: float = 0.0, single_step_s: float | None = None,
            tau: float | None = None, n_sims: int = 4000, seed: int = 0,
            fwd_fraction: float = DEFAULT_FWD_FRACTION) -> dict[str, float]:
    """Predicted synchronous step time and scaling efficiency from measured micro-batch times.

    Args:
        micro_times: measured per-micro-batch times (flat, or per rank first).
        n_workers, m: N and M. comm_s: per-step overhead T_c of the N-worker run.
        single_step_s: measured mean step time of ONE worker (default: ``M E[t]``, no overhead).
        tau: also predict DropCompute with this threshold.
        fwd_fraction: share of a micro-batch before DropCompute's forward/backward check (Eq. 4-7 of
            :mod:`mmst.distributed.straggler_model`).

    Returns:
        dict: ``step_mc_s``, ``step_blom_s`` (Eq. 1 with MC / Blom), ``eff_mc``, ``eff_blom`` (Eq. 3),
        and with ``tau`` the DropCompute ``dc_step_s``, ``dc_drop_rate``, ``dc_speedup``, ``dc_overshoot_s``.
    """
    pools = sample_pools(micro_times, n_workers)
    t1 = single_step_s if single_step_s is not None else m * float(np.concatenate(pools).mean())
    mc = expected_max_sum_mc(micro_times, n_workers, m, n_sims, seed) + comm_s
    bl = expected_max_sum_blom(micro_times, n_workers, m) + comm_s
    out = {"step_mc_s": mc, "step_blom_s": bl, "eff_mc": t1 / mc, "eff_blom": t1 / bl}
    if tau is not None:
        r = dropcompute_expectations(micro_times, n_workers, m, tau, comm_s, n_sims, seed, fwd_fraction=fwd_fraction)
        out.update(dc_step_s=r["step_s"], dc_drop_rate=r["drop_rate"], dc_speedup=r["speedup"],
                   dc_overshoot_s=r["overshoot_s"])
    return out
