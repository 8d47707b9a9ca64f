"""Unit tests of the analytic straggler model and the straggler injector (no processes, fast)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmst.distributed.straggler_model import choose_tau, dropcompute_expectations
from mmst.distributed.stragglers import StragglerInjector, parse_delay_spec, parse_slow_rank
from mmst.simulation.step_time import blom_quantile, expected_max_sum_blom, expected_max_sum_mc, predict


def test_blom_quantile_values():
    assert blom_quantile(1) == 0.0
    # E[max of 2 std normals] = 1/sqrt(pi) = 0.5642; Blom: Phi^-1(1.625/2.25) = 0.5895
    assert abs(blom_quantile(2) - 0.5895) < 1e-3
    qs = [blom_quantile(n) for n in (2, 4, 8, 16)]
    assert qs == sorted(qs)
    with pytest.raises(ValueError):
        blom_quantile(0)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_mc_matches_blom_for_normal_times(n):
    rng = np.random.default_rng(0)
    t = rng.normal(1.0, 0.2, size=20000)
    mc = expected_max_sum_mc(t, n, 4, n_sims=20000)
    bl = expected_max_sum_blom(t, n, 4)
    assert abs(mc - bl) / mc < 0.01
    assert mc > 4 * 1.0  # the max exceeds the mean


def test_dropcompute_inf_is_sync_and_choose_tau_helps():
    rng = np.random.default_rng(1)
    s2 = math.log1p(0.5 ** 2)
    times = np.exp(rng.normal(-s2 / 2, math.sqrt(s2), size=(8, 20, 4)))  # lognormal, mean 1, CV 0.5
    r = dropcompute_expectations(times, 8, 4, math.inf)
    assert r["drop_rate"] == 0.0 and abs(r["speedup"] - 1.0) < 1e-12
    best = choose_tau(times, comm_s=0.1)
    assert best["speedup"] > 1.05 and 0 < best["drop_rate"] < 0.3
    capped = choose_tau(times, comm_s=0.1, max_drop_rate=0.02)
    assert capped["drop_rate"] <= 0.02
    p = predict(times, 8, 4, tau=best["tau_s"])
    assert 0.5 < p["eff_mc"] < 1.0 and p["dc_speedup"] > 1.0


def test_slow_rank_pools_are_kept():
    fast, slow = np.ones(100), 2 * np.ones(100)
    assert expected_max_sum_mc([fast, slow], 2, 4) == pytest.approx(8.0)
    assert expected_max_sum_mc(fast, 4, 4) == pytest.approx(4.0)


def test_parse_delay_specs():
    assert parse_delay_spec("none").kind == "none"
    assert parse_delay_spec("lognormal:cv=0").kind == "const"
    d = parse_delay_spec("lognormal:cv=0.5")
    assert d.cv == 0.5 and str(d) == "lognormal:cv=0.5"
    assert parse_delay_spec("exp:c=2").mean == 2.0
    assert parse_delay_spec("pareto:alpha=2.5").cv == pytest.approx(1 / math.sqrt(2.5 * 0.5))
    for bad in ("gauss:cv=1", "lognormal", "lognormal:sigma=1", "pareto:alpha=1"):
        with pytest.raises(ValueError):
            parse_delay_spec(bad)
    assert parse_slow_rank("1:2.5") == (1, 2.5) and parse_slow_rank(None) is None
    with pytest.raises(ValueError):
        parse_slow_rank("x:2")


@pytest.mark.parametrize("text", ["lognormal:cv=0.3", "lognormal:cv=0.5", "pareto:alpha=3", "exp:c=1"])
def test_delay_distribution_moments(text):
    spec = parse_delay_spec(text)
    x = spec.sample(np.random.default_rng(0), 400000)
    assert abs(x.mean() - spec.mean) < 0.02
    if text.startswith("lognormal") or text.startswith("exp"):
        assert abs(x.std() / x.mean() - spec.cv) < 0.03


def test_injector_seeds_deadline_and_slow_rank():
    slept: list[float] = []
    now = [0.0]

    def sleep(d):
        slept.append(d)
        now[0] += d

    a = StragglerInjector("lognormal:cv=0.5", rank=0, seed=3, base_s=0.01, sleep=sleep, clock=lambda: now[0])
    b = StragglerInjector("lognormal:cv=0.5", rank=0, seed=3, base_s=0.01)
    c = StragglerInjector("lognormal:cv=0.5", rank=1, seed=3, base_s=0.01)
    da, db, dc = a.sample_delay(), b.sample_delay(), c.sample_delay()
    assert da == db and da != dc  # same rank+seed => same delays; per-rank streams differ
    assert a.delay(deadline=now[0] + 1e-9) is False and slept[-1] == pytest.approx(1e-9)
    s = StragglerInjector("const", rank=1, base_s=0.01, slow_rank=(1, 3.0))
    assert s.sample_delay() == pytest.approx(0.03)
    frac = StragglerInjector("const", rank=0, fraction=0.5)
    frac.observe_compute(0.2)
    assert frac.sample_delay() == pytest.approx(0.1)
    assert StragglerInjector("none").sample_delay() == 0.0
