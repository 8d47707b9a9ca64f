"""mmst.evaluation.policy_compare: interpolation at equal latency, the summary object, rendering."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mmst.evaluation.instances import make_instance, write_instances
from mmst.evaluation.policy_compare import (
    CompareError,
    bootstrap_difference,
    equal_latency,
    holm,
    interpolate,
    load_sweep,
    summary,
    waitk_range_coverage,
)

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
    eq = equal_latency({"waitk": waitk, "alignatt": aa, "la": la}, ["de", "ja"], (3, 5), "AL")
    de3 = eq["k3"]["de"]
    assert de3["waitk"] == {"latency": 1500.0, "BLEU": 20.0, "AL": 1500, "length_ratio": None, "flagged": False,
                            "degenerate": False}
    assert de3["adaptive"]["alignatt"] == pytest.approx(26.0)  # 22 + 8 * 500 / 1000
    assert de3["adaptive"]["la"] is None  # a single point at 1400 ms: 1500 is outside its range
    assert de3["best"] == "alignatt" and de3["beats_waitk"] == ["alignatt"]
    ja3 = eq["k3"]["ja"]
    assert ja3["adaptive"]["alignatt"] == pytest.approx(12.0) and ja3["best"] == "waitk" and ja3["beats_waitk"] == []
    assert eq["k5"]["de"]["adaptive"]["alignatt"] is None  # 2200 ms beyond alignatt's 2000 ms
    s = summary(eq)
    assert s == {"metric": "LAAL", "correction": {"method": "holm", "family_wise_level": 0.05, "tests": 0,
                                                  "smallest_p_holm": None},
                 "langs_adaptive_beats_waitk_offline_model": {"k3": 1, "k5": 0},
                 "comparisons_excluded": {"k3": 0, "k5": 0},
                 "best_policy_per_lang": {"de": {"k3": "alignatt", "k5": "waitk"}, "ja": {"k3": "waitk", "k5": "waitk"}}}
    eq_ca = equal_latency({"waitk": waitk, "alignatt": aa}, ["de"], (3,), "AL_CA")
    assert eq_ca["k3"]["de"]["waitk"]["latency"] == 1700.0
    assert eq_ca["k3"]["de"]["adaptive"]["alignatt"] == pytest.approx(22 + 8 * 500 / 1100)
    with pytest.raises(CompareError, match="needs a wait-k sweep"):
        equal_latency({"alignatt": aa}, ["de"])
    with pytest.raises(CompareError, match="no k=7"):
        equal_latency({"waitk": waitk}, ["de"], (7,))


def test_waitk_range_coverage_names_the_end_a_sweep_misses():
    # wait-k's AL: de 800 (k=1) to 2200 (k=5), ja 700 to 2100; k=7 (3000 ms) is outside k=1..5 and ignored
    waitk = _sweep("waitk", "k", [(1, {"de": (10, 800, 0), "ja": (5, 700, 0)}), (3, {"de": (20, 1500, 0), "ja": (15, 1400, 0)}),
                                  (5, {"de": (25, 2200, 0), "ja": (22, 2100, 0)}), (7, {"de": (26, 3000, 0), "ja": (23, 3000, 0)})])
    # edatt: de 800 to 2500 covers it; ja 900 to 2100 misses the low end. la: de 1400 only, no ja point
    edatt = _sweep("edatt", "frames", [(1, {"de": (9, 800, 0), "ja": (8, 900, 0)}), (9, {"de": (24, 2500, 0), "ja": (20, 2100, 0)})])
    la = _sweep("la", "n", [(2, {"de": (18, 1400, 0)})])
    cov = waitk_range_coverage({"waitk": waitk, "edatt": edatt, "la": la}, ["de", "ja"], metric="AL")
    assert cov["edatt"]["de"] == {"waitk": [800.0, 2200.0], "waitk_ks": [1, 5], "sweep": [800.0, 2500.0], "unreached": []}
    assert cov["edatt"]["ja"]["unreached"] == ["low"] and cov["edatt"]["ja"]["sweep"] == [900.0, 2100.0]
    assert cov["la"]["de"]["unreached"] == ["low", "high"] and cov["la"]["de"]["sweep"] == [1400.0, 1400.0]
    assert cov["la"]["ja"] == {"waitk": [700.0, 2100.0], "waitk_ks": [1, 5], "sweep": None, "unreached": ["low", "high"]}
    with pytest.raises(CompareError, match="no LAAL for de"):
        waitk_range_coverage({"waitk": waitk}, ["de"])


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



# ---------------------------------------------------------------- LAAL summary, flags and bootstrap
REFS = [f"the cat number {i} sat on the mat today" for i in range(20)]


def _write_point(d: Path, lang: str, hyps: list[str]) -> None:
    write_instances(d / lang / "instances.log", [
        make_instance(i, h.split(), [100.0] * len(h.split()), [110.0] * len(h.split()), r, "x.wav", 2000.0)
        for i, (h, r) in enumerate(zip(hyps, REFS))])


def _results_tree(root: Path) -> None:
    """offline model: wait-k k=1,3,5 and alignatt frames=2,8 (LAAL, AL, length ratio per point by hand);
    de hypotheses on disk for the bootstrap: wait-k k=3 drops the last two words everywhere, alignatt
    frames=2 and 8 are exact (a clear win at wait-k's LAAL); es: alignatt differs from wait-k on one
    sentence only (a win of the point estimate inside the noise: a tie)."""
    def scores(points):
        return {"policy": points[0][0], "swept_param": points[0][1], "langs": ["de", "es"], "sweep": {
            lab: {"params": par, "per_lang": per} for _, _, lab, par, per in points}}

    pl = lambda b, laal, al, lr: {"BLEU": b, "LAAL": laal, "LAAL_CA": laal + 100, "AL": al, "AL_CA": al + 100,  # noqa: E731
                                  "length_ratio": lr}
    wk = [("waitk", "k", "k1", {"k": 1}, {"de": pl(10, 700, 650, 0.9), "es": pl(10, 700, 650, 0.9)}),
          ("waitk", "k", "k3", {"k": 3}, {"de": pl(20, 1500, 1400, 0.8), "es": pl(20, 1500, 1400, 1.0)}),
          ("waitk", "k", "k5", {"k": 5}, {"de": pl(25, 2200, 2100, 1.0), "es": pl(25, 2200, 2100, 1.0)})]
    aa = [("alignatt", "frames", "alignatt-frames2", {"frames": 2},
           {"de": pl(90, 1000, -300, 1.6), "es": pl(21, 1000, 900, 1.0)}),
          ("alignatt", "frames", "alignatt-frames8", {"frames": 8},
           {"de": pl(90, 2000, 1900, 1.0), "es": pl(21, 2000, 1900, 0.65)})]
    for name, pts in (("waitk", wk), ("alignatt", aa)):
        d = root / "offline" / name
        d.mkdir(parents=True)
        (d / "scores.json").write_text(json.dumps(scores(pts)))
        (d / pts[0][2] / "scores.json").parent.mkdir(parents=True)
        (d / pts[0][2] / "scores.json").write_text(json.dumps({"config": {
            "split": "tst-COMMON", "n_utterances": 20, "source_segment_size_ms": 320, "max_len_a": 0.45,
            "max_len_b": 5}}))
    short = [" ".join(r.split()[:-2]) for r in REFS]
    _write_point(root / "offline/waitk/k3", "de", short)
    for lab in ("alignatt-frames2", "alignatt-frames8"):
        _write_point(root / "offline/alignatt" / lab, "de", REFS)
    _write_point(root / "offline/waitk/k3", "es", short)
    one_better = [REFS[0]] + short[1:]
    for lab in ("alignatt-frames2", "alignatt-frames8"):
        _write_point(root / "offline/alignatt" / lab, "es", one_better)


def test_bootstrap_interval_tells_a_win_from_a_tie(tmp_path):
    _results_tree(tmp_path)
    wk = load_sweep(tmp_path / "offline/waitk")
    aa = load_sweep(tmp_path / "offline/alignatt")
    k3 = wk["points"][1]
    win = bootstrap_difference("de", k3, aa["points"][0], aa["points"][1], 0.5, 200)
    assert win["verdict"] == "beats" and win["low"] > 0 and win["delta"] > 0
    tie = bootstrap_difference("es", k3, aa["points"][0], aa["points"][1], 0.5, 200)
    # one sentence of 20 differs: about (19/20)^20 = 36% of the resamples leave it out, so the lower
    # bound of the 95% interval is exactly 0
    assert tie["delta"] > 0 and tie["low"] == 0.0 and tie["verdict"] == "tie"
    assert bootstrap_difference("ja", k3, aa["points"][0], aa["points"][1], 0.5, 50) is None  # no hypotheses


def test_policy_results_summary_on_a_synthetic_results_tree(tmp_path):
    import policy_results

    _results_tree(tmp_path / "root")
    out = tmp_path / "out"
    rc = policy_results.main(["--root", str(tmp_path / "root"), "--models", "offline", "--bootstrap", "200",
                              "--out-json", str(out / "r.json"), "--out-md", str(out / "r.md"),
                              "--plot-dir", str(out / "img")])
    assert rc == 0
    res = json.loads((out / "r.json").read_text())
    s = res["summary"]
    # de: alignatt at LAAL 1500 interpolates 90 and wins outside the noise, but between a point of length ratio
    # 1.6 (an outlier) and one of 1.0: the win is shown, not counted; es: 21 > 20 but a tie
    assert s["langs_adaptive_beats_waitk_offline_model"] == {"k3": 0, "k5": 0}
    assert s["comparisons_excluded"] == {"k3": 2, "k5": 0}
    assert s["best_policy_per_lang"] == {"de": {"k3": "waitk", "k5": "waitk"}, "es": {"k3": "waitk", "k5": "waitk"}}
    assert s["metric"] == "LAAL" and s["min_laal_ms"] == 700 and s["points_per_policy_min"] == 2
    assert s["max_length_ratio"] == 1.6 and s["min_length_ratio"] == 0.65
    eq = res["equal_latency"]["offline"]["LAAL"]["k3"]
    assert eq["de"]["waitk"]["AL"] == 1400 and eq["de"]["ci"]["alignatt"]["verdict"] == "beats"
    assert eq["de"]["flagged"] == ["alignatt"] and eq["es"]["flagged"] == ["alignatt"]
    assert eq["de"]["excluded"] == ["alignatt"] and eq["de"]["beats_waitk"] == []
    assert eq["es"]["ci"]["alignatt"]["verdict"] == "tie" and eq["es"]["beats_waitk"] == []
    assert res["equal_latency"]["offline"]["LAAL_CA"]["k3"]["de"]["waitk"]["latency"] == 1600
    md = (out / "r.md").read_text()
    assert "1.60 ⚑" in md and "0.65 ⚑" in md and "tie" in md and "best at k=3 LAAL" in md
    # the sweeps were decoded with the cap floor(0.45 S + 5): every row and column says so
    assert "| alignatt[a=0.45,b=5] | frames=2 |" in md and "| wait-k BLEU | alignatt[a=0.45,b=5] | best |" in md
    assert "p_holm 0.02 beats" in md and res["summary"]["correction"]["tests"] == 2
    assert (out / "img" / "policies_hard_offline.png").stat().st_size > 1000
    # alignatt's LAAL (1000 to 2000 ms) reaches neither end of wait-k's (700 at k=1 to 2200 at k=5): JSON and table
    assert res["coverage"]["offline"]["alignatt"]["de"] == {"waitk": [700, 2200], "waitk_ks": [1, 5],
                                                            "sweep": [1000, 2000], "unreached": ["low", "high"]}
    assert s["sweeps_short_of_waitk_laal_range"] == {"short": 2, "of": 2}
    assert "| alignatt[a=0.45,b=5] | es | 700 to 2200 | 1000 to 2000 | low (k=1), high (k=5) |" in md
    # the docs summary (tools/render_docs.py) lists it too, and computes the same from the sweeps of results
    # written before the JSON had "coverage"
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import render_docs

    text = render_docs.policies_summary(res, "r.md")
    assert "2 of 2 sweeps (model x policy x language) do not reach an end" in text
    assert "| offline | alignatt[a=0.45,b=5] | de, es | de, es |" in text
    assert render_docs.policies_summary({k: v for k, v in res.items() if k != "coverage"}, "r.md") == text


# ---------------------------------------------------------------- pairing and Holm's correction
def test_bootstrap_is_paired_a_gain_on_every_sentence_wins_in_every_resample(tmp_path):
    """The policy writes one more correct word than wait-k on every sentence, so a paired resample (the same
    sentences for both systems) always favours it: the interval lies above 0 and the p-value is the smallest
    possible, 2 / (n + 1). Resampling the systems independently mixes the sentences' very different qualities
    into the difference and the interval straddles 0."""
    import numpy as np

    rng = np.random.default_rng(3)
    refs, base, better = [], [], []
    for i in range(30):
        words = [f"w{i}x{j}" for j in range(int(rng.integers(8, 30)))]
        q = int(rng.integers(0, len(words) - 1))  # correct leading words of wait-k's hypothesis
        refs.append(" ".join(words))
        base.append(" ".join(words[:q] + ["zz"] * (len(words) - q)))
        better.append(" ".join(words[:q + 1] + ["zz"] * (len(words) - q - 1)))
    pts = {}
    for name, hyps in (("waitk", base), ("policy", better)):
        write_instances(tmp_path / name / "de" / "instances.log", [
            make_instance(i, h.split(), [100.0] * len(h.split()), [110.0] * len(h.split()), r, "x.wav", 2000.0)
            for i, (h, r) in enumerate(zip(hyps, refs))])
        pts[name] = {"dir": str(tmp_path / name)}
    n = 300
    res = bootstrap_difference("de", pts["waitk"], pts["policy"], pts["policy"], 0.0, n)
    assert res["low"] > 0 and res["p"] == pytest.approx(2 / (n + 1)) and res["verdict"] == "beats"


def test_holm_adjusted_p_values_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4 * 0.005, 3 * 0.01, 2 * 0.03, max(0.06, 1 * 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.2]) == [0.2] and holm([]) == [] and holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])


def test_a_win_that_holm_does_not_confirm_is_a_tie(tmp_path):
    # the tree's de win holds in all 50 resamples (p = 2/51); with es, the table has 2 tests at k = 3, so Holm
    # gives de p_holm = 4/51 > 0.05: a tie, although the uncorrected interval lies above 0
    _results_tree(tmp_path)
    sweeps = {"waitk": load_sweep(tmp_path / "offline/waitk"), "alignatt": load_sweep(tmp_path / "offline/alignatt")}
    eq = equal_latency(sweeps, ["de", "es"], (3, 5), "LAAL", bootstrap=50)
    de = eq["k3"]["de"]["ci"]["alignatt"]
    assert de["p"] == pytest.approx(2 / 51) and de["p_holm"] == pytest.approx(4 / 51) and de["low"] > 0
    assert de["verdict_uncorrected"] == "beats" and de["verdict"] == "tie"
    assert eq["k3"]["de"]["beats_waitk"] == [] and eq["k3"]["de"]["best"] == "waitk"
    assert eq["k5"]["de"]["ci"]["alignatt"] is None  # outside the sweep's range: not a test
    # a win in every one of the 50 resamples: 2 tests x 2/51 = 0.078 > 0.05, so no win could survive
    assert summary(eq)["correction"] == pytest.approx({"method": "holm", "family_wise_level": 0.05, "tests": 2,
                                                       "smallest_p_holm": 4 / 51})
    eq = equal_latency(sweeps, ["de", "es"], (3, 5), "LAAL", bootstrap=200)  # p = 2/201, p_holm = 4/201
    assert eq["k3"]["de"]["ci"]["alignatt"]["verdict"] == "beats"
    # ... but interpolated from a length-ratio outlier (1.6): shown, not counted
    assert eq["k3"]["de"]["excluded"] == ["alignatt"] and eq["k3"]["de"]["beats_waitk"] == []


# ---------------------------------------------------------------- degenerate points and outliers are not wins
def test_a_win_on_a_degenerate_or_outlier_point_is_not_counted():
    """At wait-k's AL (k=3: 1500 ms, BLEU 20) every policy interpolates a higher BLEU (point estimates decide: no
    hypotheses on disk). alignatt's points are sound: it beats wait-k. la's lower point is likely degenerate
    (OmniSTEval's |DSPTV| > 20: its words came in one burst at the end), edatt's upper point has a length ratio of
    1.8: both are shown and marked, and left out of beats_waitk. At k=5 wait-k's own point is degenerate: no
    policy is counted. Before degenerate points and outliers were left out, la and edatt counted as wins."""
    from mmst.evaluation.policy_compare import render_markdown

    waitk = _sweep("waitk", "k", [(3, {"de": (20, 1500, 1600)}), (5, {"de": (25, 2200, 2300)})])
    waitk["points"][1]["per_lang"]["de"]["likely_degenerate"] = True
    aa = _sweep("alignatt", "frames", [(2, {"de": (22, 1000, 1100)}), (8, {"de": (30, 2500, 2600)})])
    la = _sweep("la", "n", [(2, {"de": (24, 1000, 1100)}), (4, {"de": (32, 2500, 2600)})])
    la["points"][0]["per_lang"]["de"].update(DSPTV=48.2)  # only DSPTV recorded: |48.2| > 20
    ed = _sweep("edatt", "alpha", [(1, {"de": (23, 1000, 1100)}), (2, {"de": (31, 2500, 2600)})])
    ed["points"][1]["per_lang"]["de"].update(length_ratio=1.8, likely_degenerate=False)
    eq = equal_latency({"waitk": waitk, "alignatt": aa, "la": la, "edatt": ed}, ["de"], (3, 5), "AL")
    r3 = eq["k3"]["de"]
    assert r3["adaptive"]["la"] == pytest.approx(24 + 8 * 500 / 1500) and r3["adaptive"]["edatt"] > 20
    assert r3["degenerate"] == ["la"] and r3["flagged"] == ["edatt"] and r3["excluded"] == ["edatt", "la"]
    assert r3["beats_waitk"] == ["alignatt"] and r3["best"] == "alignatt"
    r5 = eq["k5"]["de"]
    assert r5["waitk"]["degenerate"] is True and r5["excluded"] == ["alignatt", "edatt", "la"]
    assert r5["beats_waitk"] == [] and r5["best"] == "waitk"
    s = summary(eq)
    assert s["langs_adaptive_beats_waitk_offline_model"] == {"k3": 1, "k5": 1 - 1}
    assert s["comparisons_excluded"] == {"k3": 2, "k5": 3}
    md = render_markdown({"summary": s, "title": "t", "langs": ["de"], "split": "x", "n_utterances": 1,
                          "segment_ms": 320, "provenance": {"command": "c", "date": "d", "git_commit": "g",
                                                            "machine": {"cpu": "c", "cores": 2, "torch": "t"}},
                          "models": {"m": {}}, "equal_latency": {"m": {"AL": eq}},
                          "sweeps": {"m": {"waitk": waitk, "alignatt": aa, "la": la, "edatt": ed}}})
    assert "k=3: 2, k=5: 3" in md and "†" in md and "| la | n=2 | de | 24.0 |" in md


# ---------------------------------------------------------------- training seeds: mean difference, shared indices
def test_two_seeds_mean_difference_by_hand():
    """Each seed is compared at its own wait-k AL (k=3); the headline is the mean over seeds of the difference.
    alignatt wins on seed 1 (+6) and loses on seed 2 (-8): mean -1, not a win. la wins on both (+6, +4.6)."""
    from mmst.evaluation.policy_compare import equal_latency_seeds

    s1 = {"waitk": _sweep("waitk", "k", [(3, {"de": (20, 1500, 1600)})]),
          "alignatt": _sweep("alignatt", "frames", [(2, {"de": (22, 1000, 1100)}), (8, {"de": (30, 2000, 2100)})]),
          "la": _sweep("la", "n", [(2, {"de": (24, 1000, 1100)}), (4, {"de": (28, 2000, 2100)})])}
    s2 = {"waitk": _sweep("waitk", "k", [(3, {"de": (24, 1600, 1700)})]),
          "alignatt": _sweep("alignatt", "frames", [(2, {"de": (10, 1000, 1100)}), (8, {"de": (20, 2000, 2100)})]),
          "la": _sweep("la", "n", [(2, {"de": (25, 1000, 1100)}), (4, {"de": (31, 2000, 2100)})])}
    r = equal_latency_seeds({"seed1": s1, "seed2": s2}, ["de"], (3,), "AL")["k3"]["de"]
    # seed 1 at 1500 ms: alignatt 22 + 8 * 0.5 = 26 (+6), la 26 (+6); seed 2 at 1600 ms: alignatt 10 + 10 * 0.6 = 16
    # (-8), la 25 + 6 * 0.6 = 28.6 (+4.6)
    assert r["per_seed"]["seed1"]["difference"] == pytest.approx({"alignatt": 6.0, "la": 6.0})
    assert r["per_seed"]["seed2"]["difference"] == pytest.approx({"alignatt": -8.0, "la": 4.6})
    assert r["difference"] == pytest.approx({"alignatt": -1.0, "la": 5.3})
    assert r["waitk"]["latency"] == pytest.approx(1550.0) and r["waitk"]["BLEU"] == pytest.approx(22.0)
    assert r["adaptive"] == pytest.approx({"alignatt": 21.0, "la": 27.3})
    assert r["beats_waitk"] == ["la"] and r["best"] == "la"
    assert r["per_seed"]["seed2"]["waitk"]["latency"] == 1600.0 and r["per_seed"]["seed1"]["ci"] == {"alignatt": None, "la": None}
    # a likely degenerate point in one seed leaves the comparison out of the headline
    s2["la"]["points"][0]["per_lang"]["de"]["likely_degenerate"] = True
    r = equal_latency_seeds({"seed1": s1, "seed2": s2}, ["de"], (3,), "AL")["k3"]["de"]
    assert r["excluded"] == ["la"] and r["beats_waitk"] == [] and r["best"] == "waitk"
    with pytest.raises(CompareError, match="different policy sweeps"):
        equal_latency_seeds({"seed1": s1, "seed2": {"waitk": s2["waitk"]}}, ["de"], (3,), "AL")


def _seed_trees(root: Path, n_seeds: int = 2) -> None:
    """``root/offline/seed<N>/``: the results tree of :func:`_results_tree` once per seed (identical outputs)."""
    for n in range(1, n_seeds + 1):
        _results_tree(root / f"tmp{n}")
        (root / "offline").mkdir(parents=True, exist_ok=True)
        (root / f"tmp{n}" / "offline").rename(root / "offline" / f"seed{n}")


def _load_seeds(root: Path, seeds=(1, 2)) -> dict:
    return {f"seed{n}": {p: load_sweep(root / "offline" / f"seed{n}" / p) for p in ("waitk", "alignatt")} for n in seeds}


def test_seeds_with_identical_outputs_give_exactly_the_one_seed_interval(tmp_path):
    """The bootstrap draws one set of sentence indices for every seed: two seeds with identical outputs give exactly
    the one-seed interval, p-value and Holm correction (with an independent draw per seed the mean of two resampled
    differences would vary less, and the interval would narrow)."""
    from mmst.evaluation.policy_compare import equal_latency_seeds

    _seed_trees(tmp_path)
    by_seed = _load_seeds(tmp_path)
    one = equal_latency(by_seed["seed1"], ["de", "es"], (3, 5), "LAAL", bootstrap=200)
    two = equal_latency_seeds(by_seed, ["de", "es"], (3, 5), "LAAL", bootstrap=200)
    for lang in ("de", "es"):
        a, b = one["k3"][lang]["ci"]["alignatt"], two["k3"][lang]["ci"]["alignatt"]
        assert b == a  # delta, low, high, p, p_holm, verdicts: exactly equal
        for seed in ("seed1", "seed2"):
            assert two["k3"][lang]["per_seed"][seed]["ci"]["alignatt"] == {k: a[k] for k in ("delta", "low", "high", "p")}
        assert {k: v for k, v in two["k3"][lang].items() if k not in ("difference", "per_seed")} == one["k3"][lang]
    # one seed through the seeds path: every number of the one-seed comparison
    single = equal_latency_seeds({"seed1": by_seed["seed1"]}, ["de", "es"], (3, 5), "LAAL", bootstrap=200)
    assert {kk: {lang: {k: v for k, v in r.items() if k not in ("difference", "per_seed")} for lang, r in row.items()}
            for kk, row in single.items()} == one


def test_seed_intervals_come_from_the_same_resampled_sentences(tmp_path):
    """Seed 2's alignatt writes what its wait-k writes (difference 0 in every resample); seed 1's wins on de. Each
    seed's own interval equals its one-seed bootstrap (the same index draw), and the headline difference is their
    mean, (d1 + 0) / 2."""
    from mmst.evaluation.policy_compare import equal_latency_seeds

    _seed_trees(tmp_path)
    short = [" ".join(r.split()[:-2]) for r in REFS]
    for lab in ("alignatt-frames2", "alignatt-frames8"):
        _write_point(tmp_path / "offline/seed2/alignatt" / lab, "de", short)
    by_seed = _load_seeds(tmp_path)
    two = equal_latency_seeds(by_seed, ["de", "es"], (3,), "LAAL", bootstrap=200)["k3"]["de"]
    own = {s: equal_latency(by_seed[s], ["de", "es"], (3,), "LAAL", bootstrap=200)["k3"]["de"]["ci"]["alignatt"]
           for s in by_seed}
    for s in by_seed:
        assert two["per_seed"][s]["ci"]["alignatt"] == {k: own[s][k] for k in ("delta", "low", "high", "p")}
    assert own["seed2"]["low"] == own["seed2"]["high"] == 0.0 and own["seed1"]["low"] > 0
    assert two["ci"]["alignatt"]["delta"] == pytest.approx(own["seed1"]["delta"] / 2)
    assert two["ci"]["alignatt"]["low"] == pytest.approx(own["seed1"]["low"] / 2)
    assert two["ci"]["alignatt"]["high"] == pytest.approx(own["seed1"]["high"] / 2)


def test_policy_results_with_seeds(tmp_path):
    """``--seeds 1,2`` reads <model>/seed<N>/; the summary records the protocol and the Markdown's headline names
    test set, seeds, tune split, interval and correction; ``--seeds 1`` reproduces the one-seed numbers."""
    import policy_results

    _seed_trees(tmp_path / "evals")
    _results_tree(tmp_path / "old")
    out = tmp_path / "out"

    def run(root, *extra):
        return policy_results.main(["--evals-dir", str(root), "--models", "offline", "--bootstrap", "200",
                                    "--out-json", str(out / "r.json"), "--out-md", str(out / "r.md"),
                                    "--plot-dir", str(out / "img"), *extra])

    assert run(tmp_path / "old") == 0
    old = json.loads((out / "r.json").read_text())
    assert "seeds" not in old["summary"] and "tune_split" not in old["summary"]
    assert run(tmp_path / "evals", "--seeds", "1") == 0
    res = json.loads((out / "r.json").read_text())
    strip = lambda eq: {kk: {lang: {k: v for k, v in r.items() if k not in ("difference", "per_seed")}  # noqa: E731
                             for lang, r in row.items()} for kk, row in eq.items()}
    assert strip(res["equal_latency"]["offline"]["LAAL"]) == old["equal_latency"]["offline"]["LAAL"]
    assert run(tmp_path / "evals", "--seeds", "1,2", "--tune-split", "dev") == 0
    res = json.loads((out / "r.json").read_text())
    s = res["summary"]
    assert s["seeds"] == [1, 2] and s["test_split"] == "tst-COMMON" and s["tune_split"] == "dev"
    assert s["correction"]["method"] == "holm" and s["interval"]["level"] == 0.95 and s["interval"]["resamples"] == 200
    assert set(res["sweeps_by_seed"]["offline"]) == {"seed1", "seed2"}
    assert set(res["equal_latency"]["offline"]["LAAL"]["k3"]["de"]["per_seed"]) == {"seed1", "seed2"}
    md = (out / "r.md").read_text()
    assert "On tst-COMMON (first 20 utterances), with training seeds 1, 2 and grids and length cap chosen on dev" in md
    assert "95% paired bootstrap interval over 200 resamples of the same sentences in every seed" in md
    assert "Holm's correction over the 2 tests of the table" in md and "| de | 3 | seed2 | 1500 | 20.0 |" in md
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import render_docs

    assert "with training seeds 1, 2" in render_docs.policies_summary(res, "r.md")
    # the tune split must not be the split reported on
    assert run(tmp_path / "evals", "--seeds", "1,2", "--tune-split", "tst-COMMON") == 1
    assert run(tmp_path / "evals", "--seeds", "1,x") == 1


def test_coverage_only_writes_the_tuning_report(tmp_path):
    import policy_results

    _seed_trees(tmp_path / "dev", 1)
    out = tmp_path / "dev"
    assert policy_results.main(["--evals-dir", str(out), "--models", "offline", "--seeds", "1", "--coverage-only",
                                "--out-json", str(out / "coverage.json"), "--out-md", str(out / "coverage.md")]) == 0
    rep = json.loads((out / "coverage.json").read_text())
    assert rep["summary"]["sweeps_short_of_waitk_laal_range"] == {"short": 2, "of": 2} and rep["seeds"] == [1]
    assert rep["coverage"]["offline"]["alignatt"]["de"]["unreached"] == ["low", "high"] and rep["cap"] == [0.45, 5]
    md = (out / "coverage.md").read_text()
    assert "chosen on this split" in md and "| alignatt[a=0.45,b=5] | de | 700 to 2200 | 1000 to 2000 |" in md
    assert "| alignatt[a=0.45,b=5] | frames=2 | de | 90.0 |" in md and "1.60 ⚑" in md
