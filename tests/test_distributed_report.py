"""Unit tests of mmst.distributed.report: a run's numbers read back from its train_log.jsonl (fast)."""

from __future__ import annotations

import json

import pytest

from mmst.distributed.report import loss_at_time, read_log, reference_target, run_summary, time_to_target


def _log():
    return [
        {"kind": "train", "update": 10, "train_time_s": 5.0, "dc_drop_rate": 0.5, "dc_tau_s": -1.0,
         "dc_delay_s": 0.1, "dc_compute_s": 0.4},
        {"kind": "valid", "update": 10, "loss": 3.0},
        {"kind": "train", "update": 20, "train_time_s": 7.0, "dc_drop_rate": 0.25, "dc_tau_s": 0.2,
         "dc_delay_s": 0.1, "dc_compute_s": 0.4},
        {"kind": "valid", "update": 20, "loss": 2.5},
        {"kind": "train", "update": 30, "train_time_s": 9.0, "dc_drop_rate": 0.0, "dc_tau_s": 0.2,
         "dc_delay_s": 0.2, "dc_compute_s": 0.4},
        {"kind": "valid", "update": 30, "loss": 2.0},
        {"kind": "event", "update": 30, "worker_lost": 2},
        {"kind": "event", "update": 10, "tau_info": {"tau_s": 0.2, "drop_rate": 0.1, "speedup": 1.3}},
    ]


def test_run_summary_counts_used_micro_batches_after_the_first_window():
    s = run_summary(_log(), n_data_ranks=4, update_freq=2)
    # windows 2 and 3: 10 updates x 4 ranks x 2 micro-batches x (1 - drop), over 4 training seconds
    assert s["microbatches_per_s"] == pytest.approx((80 * 0.75 + 80 * 1.0) / 4.0)
    assert s["drop_rate"] == pytest.approx(0.125) and s["tau_s"] == pytest.approx(0.2)
    assert s["delay_share"] == pytest.approx((0.25 + 0.5) / 2)
    assert s["curve"] == [(5.0, 3.0), (7.0, 2.5), (9.0, 2.0)] and s["curve_updates"] == [10, 20, 30]
    assert s["lost_workers"] == [2] and s["updates"] == 30
    assert s["tau_info"] == {"tau_s": 0.2, "drop_rate": 0.1, "speedup": 1.3}
    # windows starting at or after update 20 only: the last one
    late = run_summary(_log(), n_data_ranks=4, update_freq=2, measure_from=20)
    assert late["microbatches_per_s"] == pytest.approx(80 / 2.0) and late["drop_rate"] == 0.0
    with pytest.raises(ValueError, match="no log window"):
        run_summary(_log(), 4, 2, measure_from=30)
    with pytest.raises(ValueError, match="need >= 2"):
        run_summary(_log()[:2], 4, 2)


def test_time_to_target_and_reference_target():
    curve = [(5.0, 3.0), (7.0, 2.5), (9.0, 2.0)]
    assert time_to_target(curve, 2.5) == 7.0 and time_to_target(curve, 1.0) is None
    # the crossing of 2.25 lies halfway between the validations at 7 s (2.5) and 9 s (2.0)
    assert time_to_target(curve, 2.25) == pytest.approx(8.0)
    assert time_to_target(curve, 2.9) == pytest.approx(5.4)  # 5 + 2 x 0.1 / 0.5
    assert time_to_target(curve, 3.5) == 5.0  # already below at the first validation
    assert loss_at_time(curve, 6.0) == pytest.approx(2.75) and loss_at_time(curve, 9.0) == 2.0
    assert loss_at_time(curve, 4.0) is None and loss_at_time(curve, 9.5) is None
    assert reference_target(curve, [10, 20, 30]) == 2.5  # first validation at >= 2/3 of 30 updates
    with pytest.raises(ValueError):
        reference_target(curve, [10, 20])


def test_read_log_names_a_broken_line(tmp_path):
    p = tmp_path / "train_log.jsonl"
    p.write_text(json.dumps({"kind": "train"}) + "\n{broken\n")
    with pytest.raises(ValueError, match=r"train_log.jsonl:2"):
        read_log(p)
