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
