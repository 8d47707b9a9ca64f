"""The straggler benchmark's aggregation (bench/bench_stragglers_mmst.py) on hand-made runs: prediction errors are
taken per run, and the summary reports the largest."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def _run(mode: str, seed: int, mb_per_s: float, tau_info: dict | None = None) -> dict:
    return {"W": 2, "scenario": "slow", "mode": mode, "seed": seed, "curve_run": False, "microbatches_per_s": mb_per_s,
            "drop_rate": 0.1 if tau_info else 0.0, "staleness_mean": None, "staleness_max": None, "delay_share": 0.2,
            "tau_s": 0.5 if tau_info else None, "overshoot_s_slowest": None, "tau_info": tau_info}


def test_prediction_errors_are_per_run_and_the_summary_takes_the_largest():
    import bench_stragglers_mmst as bsm

    # W = 2, M = 2. DropCompute predicts 12 and 14 micro-batches/s and measures 10 and 20: errors 0.2 and 0.3.
    # DDP is predicted W M / sync_step_s = 4 / 1.0 and 4 / 0.5 (the same seed's DropCompute record) and measures 5
    # and 6: errors 0.2 and 1/3. The seed means would give 13 vs 15 (0.133) and 6 vs 5.5 (0.091)
    rows = [_run("dropcompute", 1, 10.0, {"speed": 12.0, "sync_step_s": 1.0, "drop_rate": 0.1, "overshoot_s": 0.0}),
            _run("dropcompute", 2, 20.0, {"speed": 14.0, "sync_step_s": 0.5, "drop_rate": 0.1, "overshoot_s": 0.0}),
            _run("ddp", 1, 5.0), _run("ddp", 2, 6.0)]
    agg = {r["mode"]: r for r in bsm.aggregate(rows, {}, spm=3.0, cores=2, update_freq=2)}
    assert agg["dropcompute"]["pred_error_samples_per_s_runs"] == pytest.approx([0.2, 0.3])
    assert agg["ddp"]["pred_error_samples_per_s_runs"] == pytest.approx([0.2, 1 / 3])
    assert agg["dropcompute"]["pred_error_samples_per_s"] == pytest.approx(0.3)
    assert agg["dropcompute"]["pred_samples_per_s"] == pytest.approx(13.0 * 3.0)  # the table's seed mean
    assert bsm.summary(list(agg.values()), 0)["prediction_error_samples_per_s_max"] == pytest.approx(1 / 3)


def test_paired_bootstrap_ratio_known_distribution_and_pairing():
    from mmst.distributed.report import paired_bootstrap_ratio

    # den all 1, num (1, 1, 4): a resample's ratio is 1 + c, c ~ Binomial(3, 1/3) the draws of the third run:
    # P(1) = 8/27, P(2) = 12/27, P(3) = 6/27, P(4) = 1/27 = 0.037 > 0.025, so the 2.5 and 97.5 percentiles are 1 and 4
    assert paired_bootstrap_ratio([1.0, 1.0, 4.0], [1.0, 1.0, 1.0]) == pytest.approx((1.0, 4.0))
    # every run twice as fast as its own DDP run: the paired ratio is 2 in every resample (an unpaired bootstrap,
    # drawing the two sides independently, gives ratios from 0.02 to 200 here)
    assert paired_bootstrap_ratio([2.0, 20.0, 200.0], [1.0, 10.0, 100.0]) == pytest.approx((2.0, 2.0))
    with pytest.raises(ValueError, match="need >= 2 seeds"):
        paired_bootstrap_ratio([1.0], [1.0])
    with pytest.raises(ValueError, match="one of each per seed"):
        paired_bootstrap_ratio([1.0, 2.0], [1.0, 2.0, 3.0])


def test_paired_bootstrap_ratio_equals_numpy_written_out():
    import numpy as np

    from mmst.distributed.report import paired_bootstrap_ratio

    num, den = [5.62, 5.37, 4.74], [4.25, 4.43, 5.09]
    # every one of the 27 equally likely index triples, each ratio of means; the Monte Carlo percentiles of 10000
    # resamples fall on the exact distribution's 2.5 and 97.5 percent points (the triples' ratios, sorted)
    exact = sorted(sum(num[i] for i in t) / sum(den[i] for i in t)
                   for t in np.ndindex(3, 3, 3))
    low, high = paired_bootstrap_ratio(num, den)
    assert exact[0] <= low <= exact[1] and exact[-2] <= high <= exact[-1]
    # and the same draw written with numpy directly
    idx = np.random.default_rng(0).integers(0, 3, size=(10000, 3))
    r = np.asarray(num)[idx].mean(1) / np.asarray(den)[idx].mean(1)
    assert (low, high) == pytest.approx(tuple(np.percentile(r, [2.5, 97.5])))


def test_intervals_pair_seeds_and_from_json_recomputes_only_them(tmp_path, capsys):
    import json

    import bench_stragglers_mmst as bsm

    # seed 3's DDP run failed: DropCompute is paired with DDP on seeds 1 and 2 only, (3, 6) over (1, 2): ratio 3 in
    # every resample; the row's x DDP is the ratio of all seed means
    rows = [_run("ddp", 1, 1.0), _run("ddp", 2, 2.0), {**_run("ddp", 3, 9.0), "error": "exit 1"},
            _run("dropcompute", 1, 3.0, {"speed": 3.0, "sync_step_s": 1.0, "drop_rate": 0.1, "overshoot_s": 0.0}),
            _run("dropcompute", 2, 6.0, {"speed": 6.0, "sync_step_s": 1.0, "drop_rate": 0.1, "overshoot_s": 0.0}),
            _run("dropcompute", 3, 5.0, {"speed": 5.0, "sync_step_s": 1.0, "drop_rate": 0.1, "overshoot_s": 0.0})]
    agg = bsm.aggregate(rows, {}, spm=3.0, cores=2, update_freq=2)
    ci = {r["mode"]: r.get("x_ddp_samples_per_s_ci") for r in agg}
    assert ci["dropcompute"]["seeds"] == [1, 2]
    assert (ci["dropcompute"]["low"], ci["dropcompute"]["high"]) == pytest.approx((3.0, 3.0))
    summ = bsm.summary(agg, 0)
    assert summ["x_ddp_samples_per_s_ci_w2"]["slow"]["dropcompute"] == ci["dropcompute"]
    assert "[3.00, 3.00]" in bsm.table(agg, summ, bsm.goals(summ))
    # --from-json on the same result stripped of its intervals: they come back, the measured numbers do not change,
    # and the provenance says what was recomputed and how
    stored = {"summary": {k: v for k, v in summ.items() if k != "x_ddp_samples_per_s_ci_w2"},
              "goals": bsm.goals(summ), "provenance": {"command": "python bench/bench_stragglers_mmst.py"},
              "aggregate": [{k: v for k, v in r.items() if k != "x_ddp_samples_per_s_ci"} for r in agg], "rows": rows}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(stored))
    (tmp_path / "s.md").write_text("**Stale:** measured at commit `abc`.\n\n| old table |\n")
    assert bsm.main(["--from-json", str(path)]) == 0
    out = json.loads(path.read_text())
    assert out["summary"]["x_ddp_samples_per_s_ci_w2"] == summ["x_ddp_samples_per_s_ci_w2"]
    assert [r["samples_per_s"] for r in out["aggregate"]] == [r["samples_per_s"] for r in agg]
    [rec] = out["provenance"]["recomputed"]
    assert rec["what"] == "x_ddp_samples_per_s_ci" and rec["command"].endswith(f"--from-json {path}")
    # the page: its Stale line kept (the runs are as old as they were), the table rendered again
    assert (tmp_path / "s.md").read_text() == "**Stale:** measured at commit `abc`.\n\n" + out["table_markdown"] + "\n"
    # a stored ratio that its runs do not give is an error naming the row
    stored["aggregate"][1]["x_ddp_samples_per_s"] = 2.0
    path.write_text(json.dumps(stored))
    with pytest.raises(SystemExit):
        bsm.main(["--from-json", str(path)])
    assert "aggregate row W=2 slow dropcompute: x DDP 2.0 but its runs give" in capsys.readouterr().err
