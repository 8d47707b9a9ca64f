"""mmst.evaluation.policy_compare: interpolation at equal latency, the summary object, rendering."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mmst.evaluation.policy_compare import CompareError, equal_latency, interpolate, load_sweep, summary

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval"))


def _sweep(policy, param, pts):
    """pts: [(value, {lang: (BLEU, AL, AL_CA)})]"""
    return {"policy": policy, "param": param,
            "points": [{"value": v, "params": {param: v}, "per_lang": {
                lang: {"BLEU": b, "AL": al, "AL_CA": ca} for lang, (b, al, ca) in d.items()}} for v, d in pts]}


def test_interpolate_inside_range_only():
    pts = [(1000.0, 10.0, 1), (2000.0, 20.0, 2), (3000.0, 26.0, 3)]
    assert interpolate(pts, 1500.0) == pytest.approx(15.0)
    assert interpolate(pts, 2500.0) == pytest.approx(23.0)
    assert interpolate(pts, 3000.0) == pytest.approx(26.0)
    assert interpolate(pts, 999.0) is None and interpolate(pts, 3001.0) is None
    assert interpolate([(1000.0, 10.0, 1), (1000.0, 14.0, 2), (2000.0, 20.0, 3)], 1000.0) == pytest.approx(12.0)
    assert interpolate([], 1.0) is None


def test_equal_latency_and_summary():
    waitk = _sweep("waitk", "k", [(1, {"de": (10, 800, 900), "ja": (5, 700, 800)}),
                                  (3, {"de": (20, 1500, 1700), "ja": (15, 1400, 1600)}),
                                  (5, {"de": (25, 2200, 2500), "ja": (22, 2100, 2400)})])
    aa = _sweep("alignatt", "frames", [(2, {"de": (22, 1000, 1200), "ja": (10, 1300, 1500)}),
                                       (8, {"de": (30, 2000, 2300), "ja": (14, 1500, 1800)})])
    la = _sweep("la", "n", [(2, {"de": (18, 1400, 2000), "ja": (30, 1500, 1700)})])
    eq = equal_latency({"waitk": waitk, "alignatt": aa, "la": la}, ["de", "ja"], (3, 5))
    de3 = eq["k3"]["de"]
    assert de3["waitk"] == {"latency": 1500.0, "BLEU": 20.0}
    assert de3["adaptive"]["alignatt"] == pytest.approx(26.0)  # 22 + 8 * 500 / 1000
    assert de3["adaptive"]["la"] is None  # a single point at 1400 ms: 1500 is outside its range
    assert de3["best"] == "alignatt" and de3["beats_waitk"] == ["alignatt"]
    ja3 = eq["k3"]["ja"]
    assert ja3["adaptive"]["alignatt"] == pytest.approx(12.0) and ja3["best"] == "waitk" and ja3["beats_waitk"] == []
    assert eq["k5"]["de"]["adaptive"]["alignatt"] is None  # 2200 ms beyond alignatt's 2000 ms
    s = summary(eq)
    assert s == {"langs_adaptive_beats_waitk_offline_model": {"k3": 1, "k5": 0},
                 "best_policy_per_lang": {"de": {"k3": "alignatt", "k5": "waitk"}, "ja": {"k3": "waitk", "k5": "waitk"}}}
    eq_ca = equal_latency({"waitk": waitk, "alignatt": aa}, ["de"], (3,), "AL_CA")
    assert eq_ca["k3"]["de"]["waitk"]["latency"] == 1700.0
    assert eq_ca["k3"]["de"]["adaptive"]["alignatt"] == pytest.approx(22 + 8 * 500 / 1100)
    with pytest.raises(CompareError, match="needs a wait-k sweep"):
        equal_latency({"alignatt": aa}, ["de"])
    with pytest.raises(CompareError, match="no k=7"):
        equal_latency({"waitk": waitk}, ["de"], (7,))


def test_load_sweep_reads_eval_output(tmp_path):
    d = tmp_path / "alignatt"
    d.mkdir()
    (d / "scores.json").write_text(json.dumps({
        "policy": "alignatt", "swept_param": "frames", "values": [2, 4], "langs": ["de"],
        "sweep": {"alignatt-frames2": {"per_lang": {"de": {"BLEU": 1.0, "AL": 2.0}}, "params": {"frames": 2}},
                  "alignatt-frames4": {"per_lang": {"de": {"BLEU": 3.0, "AL": 4.0}}, "params": {"frames": 4}}}}))
    sw = load_sweep(d)
    assert sw["policy"] == "alignatt" and [p["value"] for p in sw["points"]] == [2, 4]
    with pytest.raises(CompareError, match="not found"):
        load_sweep(tmp_path / "none")

