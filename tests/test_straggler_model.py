"""Unit tests of the analytic straggler model and the straggler injector (no processes, fast)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmst.distributed.straggler_model import choose_tau, dropcompute_expectations, estimate_comm_s, simulate
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
    assert capped["drop_rate"] <= 0.02 + 1e-9
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
    with pytest.raises(ValueError, match="quote"):
        parse_slow_rank(62)  # what YAML 1.1 makes of an unquoted 1:2


def test_slow_rank_flag_reaches_the_strategy_as_text():
    from mmst.training.cli import alias_overrides, build_parser
    from mmst.training.config import load_config

    args = build_parser().parse_intermixed_args(
        ["--data", "d", "--save-dir", "s", "--slow-rank", "3:2", "--straggler-delay", "lognormal:cv=0.5"])
    opts = load_config(None, alias_overrides(args)).distributed.options
    assert parse_slow_rank(opts["slow_rank"]) == (3, 2.0)
    assert parse_delay_spec(opts["straggler_delay"]).cv == pytest.approx(0.5)
    assert load_config(None, ["distributed.options.slow_rank=1:2.5"]).distributed.options["slow_rank"] == "1:2.5"


@pytest.mark.parametrize("text", ["lognormal:cv=0.3", "lognormal:cv=0.5", "pareto:alpha=3", "exp:c=1"])
def test_delay_distribution_moments(text):
    spec = parse_delay_spec(text)
    x = spec.sample(np.random.default_rng(0), 400000)
    assert abs(x.mean() - spec.mean) < 0.02
    if text.startswith("lognormal") or text.startswith("exp"):
        assert abs(x.std() / x.mean() - spec.cv) < 0.03


def test_injector_seeds_slow_rank_and_never_cuts_a_delay():
    slept: list[float] = []
    a = StragglerInjector("lognormal:cv=0.5", rank=0, seed=3, base_s=0.01, sleep=slept.append)
    b = StragglerInjector("lognormal:cv=0.5", rank=0, seed=3, base_s=0.01)
    c = StragglerInjector("lognormal:cv=0.5", rank=1, seed=3, base_s=0.01)
    da, db, dc = a.sample_delay(), b.sample_delay(), c.sample_delay()
    assert da == db and da != dc  # same rank+seed => same delays; per-rank streams differ
    # a delay is simulated compute: slept whole, whatever deadline a caller has in mind
    expected = StragglerInjector("lognormal:cv=0.5", rank=0, seed=3, base_s=0.01)
    expected.sample_delay()
    want = expected.sample_delay()
    assert a.delay() == pytest.approx(want) and slept == [pytest.approx(want)]
    assert a.total_delay_s == pytest.approx(want)
    with pytest.raises(TypeError):
        a.delay(deadline=0.0)  # no deadline cut any more
    s = StragglerInjector("const", rank=1, base_s=0.01, slow_rank=(1, 3.0))
    assert s.sample_delay() == pytest.approx(0.03)
    frac = StragglerInjector("const", rank=0, fraction=0.5)
    frac.observe_compute(0.2)
    assert frac.sample_delay() == pytest.approx(0.1)
    assert StragglerInjector("none").sample_delay() == 0.0


def _check_loop(t, tau, phi):
    """DropCompute's loop written out for one worker: checks before each micro-batch and after its
    forward phase (a share ``phi`` of the micro-batch); returns (computed, stop time)."""
    now, computed = 0.0, 0
    for x in t:
        if now >= tau:
            return computed, now
        now += phi * x
        if now >= tau:
            return computed, now
        now += (1 - phi) * x
        computed += 1
    return computed, now


def test_dropcompute_model_has_the_overshoot_of_the_real_checks():
    # one worker, two micro-batches of 1 s, forward phase half of each
    one = np.ones((1, 1, 2))
    r = dropcompute_expectations(None, 1, 2, 1.2, sims=one, fwd_fraction=0.5)
    # micro-batch 2's forward ends at 1.5 s, past tau = 1.2: it is dropped there, 0.3 s late
    assert r["drop_rate"] == pytest.approx(0.5) and r["step_s"] == pytest.approx(1.5)
    assert r["overshoot_s"] == pytest.approx(0.3)
    r = dropcompute_expectations(None, 1, 2, 0.4, sims=one, fwd_fraction=0.5)
    assert r["drop_rate"] == pytest.approx(1.0) and r["step_s"] == pytest.approx(0.5)
    r = dropcompute_expectations(None, 1, 2, 0.6, sims=one, fwd_fraction=0.5)  # finishes micro-batch 1
    assert r["drop_rate"] == pytest.approx(0.5) and r["step_s"] == pytest.approx(1.0)
    # random times, 4 workers: the model equals the loop step by step
    rng = np.random.default_rng(5)
    sims = simulate(rng.lognormal(0.0, 0.5, size=400), 4, 4, n_sims=300, seed=2)
    for tau in (1.5, 3.0, 4.5):
        done, stop = zip(*[_check_loop(sims[i, n], tau, 0.3) for i in range(300) for n in range(4)])
        r = dropcompute_expectations(None, 4, 4, tau, sims=sims, fwd_fraction=0.3)
        assert r["drop_rate"] == pytest.approx(1 - sum(done) / (300 * 16))
        assert r["step_s"] == pytest.approx(np.asarray(stop).reshape(300, 4).max(axis=1).mean())
        assert r["overshoot_s"] > 0


def test_estimate_comm_s_is_the_median_of_the_last_rank_not_the_minimum():
    times = np.array([[[1.0]] * 5, [[2.0]] * 5])  # (N=2, S=5, M=1): rank 1 always arrives last
    comm = np.array([[1.0, 1.0, 1.0, 1.0, 1.0], [0.010, 0.020, 0.030, 0.001, 0.050]])
    assert estimate_comm_s(times, comm) == pytest.approx(0.020)
    with pytest.raises(ValueError):
        estimate_comm_s(times, comm[:, :3])


def _lognormal_times(rng, shape, cv=0.5, compute=0.002, base=0.02):
    s2 = math.log1p(cv * cv)
    return compute + base * np.exp(rng.normal(-s2 / 2, math.sqrt(s2), size=shape))


def test_auto_tau_is_finite_under_lognormal_cv05_with_4_workers():
    rng = np.random.default_rng(11)
    rec = _lognormal_times(rng, (4, 10, 4))  # what --compute-threshold auto records: 10 steps of 4 ranks x 4
    r = choose_tau(rec, comm_s=0.003, fwd_fraction=1 / 3)
    assert math.isfinite(r["tau_s"]) and r["speedup"] > 1.03 and r["drop_rate"] > 0


def test_auto_tau_realised_drop_rate_respects_max_drop_rate():
    rng = np.random.default_rng(12)
    cap, n_rec = 0.05, 50
    rec = _lognormal_times(rng, (4, n_rec, 4))
    r = choose_tau(rec, comm_s=0.003, fwd_fraction=1 / 3, max_drop_rate=cap)
    assert r["unconstrained_drop_rate"] > 2 * cap  # the cap binds
    fresh = _lognormal_times(rng, (4000, 4, 4))  # steps run afterwards, same distribution
    done = sum(_check_loop(fresh[i, n], r["tau_s"], 1 / 3)[0] for i in range(4000) for n in range(4))
    realised = 1 - done / (4000 * 16)
    # sampling error: of tau (from n_rec x 16 recorded micro-batches) and of the realised rate
    se = math.sqrt(cap * (1 - cap) * (1 / (n_rec * 16) + 1 / (4000 * 16)))
    assert realised <= cap + 3 * se
