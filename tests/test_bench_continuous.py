"""bench/bench_continuous.py's summary over systems and policies, and its table, on hand-made runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "bench"))

import bench_continuous as bc  # noqa: E402
from docs_render.continuous import continuous  # noqa: E402

SYSTEMS = [("quickstart", "quickstart", False), ("quickstart+restart", "quickstart", True)]


def _run(bleu, laal, share, errs=(), segments=3, restarts=None):
    return {"per_lang": {"de": {"BLEU": bleu, "StreamLAAL": laal, "untranslated_speech_share": share}},
            "n_segments": segments, "n_restarts": len(errs) if restarts is None else restarts,
            "restart_errors_ms": list(errs)}


def _rows():
    """Two talks at wait-3: VAD BLEU 50 and 90 (no restarts), 80 and 81 (restarts) against oracle 100 and 90."""
    return [{"split": "tst-COMMON", "pause_ms": [0, 100], "policy": "waitk:k=3", "audio_s": 10.0,
             "oracle": {"quickstart": _run(100.0, 1000.0, 0.0)},
             "vad": {"quickstart": _run(50.0, 1200.0, 0.3), "quickstart+restart": _run(80.0, 1400.0, 0.0, (10, 30))}},
            {"split": "tst-unseen", "pause_ms": [0, 100], "policy": "waitk:k=3", "audio_s": 10.0,
             "oracle": {"quickstart": _run(90.0, 900.0, 0.0)},
             "vad": {"quickstart": _run(90.0, 950.0, 0.0), "quickstart+restart": _run(81.0, 1000.0, 0.01, (50,))}}]


def test_summary_picks_the_system_with_the_best_worst_ratio():
    """Ratios: without restarts min(50/100, 90/90) = 0.5, with restarts min(0.8, 0.9) = 0.8: the best. Its
    StreamLAAL excess max(400, 100), share max 0.01, restart errors 10, 30, 50 (median 30)."""
    s = bc.summarize(_rows(), ["de"], ["waitk:k=3"], SYSTEMS)
    assert (s["system"], s["policy"]) == ("quickstart+restart", "waitk:k=3")
    assert s["bleu_ratio_vs_oracle_min"] == pytest.approx(0.8)
    assert s["streamlaal_excess_ms_max"] == pytest.approx(400.0) and s["untranslated_share_max"] == 0.01
    assert s["restart_error_ms_median"] == 30 and s["restart_error_system"] == "quickstart+restart waitk:k=3"
    assert {k: g["met"] for k, g in s["goals"].items()} == {
        "bleu_ratio_vs_oracle_min": False, "streamlaal_excess_ms_max": True, "untranslated_share_max": True,
        "restart_error_ms_median": True, "rss_growth_mib_30min_no_pause": None}
    assert [x["bleu_ratio_vs_oracle_min"] for x in s["systems"]] == [pytest.approx(0.5), pytest.approx(0.8)]


def test_table_lists_talks_systems_and_goals():
    rows = _rows()
    summary = bc.summarize(rows, ["de"], ["waitk:k=3"], SYSTEMS)
    d = {"summary": summary, "rows": rows,
         "config": {"tgt_langs": ["de"], "systems": [s[0] for s in SYSTEMS], "utterances": 2, "model": "M",
                    "vad_min_silence_ms": 250.0, "max_segment_s": 20.0, "source_segment_size_ms": 320.0}}
    text = continuous(d)
    assert "| tst-COMMON | 0-100 | waitk:k=3 | 3 | 100.00 | 50.00 | 80.00 | 30.0% / 0.0% | 2 |" in text
    assert "| quickstart+restart | waitk:k=3 | 0.800 | 80.50 | 400 | 1.0% | 3 | 30 |" in text
    assert "| bleu_ratio_vs_oracle_min | 0.800 | >= 0.95 | missed |" in text


def test_per_chunk_cost_growth_compares_medians_of_minutes_not_single_minutes():
    """Minute 1 (warm-up, 50 ms) is left out; one slow minute (40 ms) at the end does not move the median of the last
    3: start median(20, 21, 19) = 20, end median(40, 22, 23) = 23 (the last minute alone would give 2.0)."""
    rows = [{"cpu_ms_per_chunk": x} for x in (50, 20, 21, 19, 22, 20, 30, 22, 23, 40)]
    assert bc.cost_growth(rows, 3) == {"cpu_ms_per_chunk_start": 20.0, "cpu_ms_per_chunk_end": 23.0,
                                       "cpu_ms_per_chunk_ratio": 1.15, "cost_window_min": 3}
    # a 4-minute run: windows of 1 minute (minute 2 against the last)
    rows = [{"cpu_ms_per_chunk": x} for x in (50, 20, 30, 25)]
    assert bc.cost_growth(rows, 5)["cpu_ms_per_chunk_ratio"] == 1.25


def test_restart_error_goal_is_the_median_over_every_restart_and_names_the_reported_systems_own():
    """A multi-sentence model (the best: ratio 0.95) restarts once, 900 ms off; the quickstart model restarts 3 times
    (10, 30, 50 ms): the goal's median is over all 4 restarts, median(10, 30, 50, 900) = 40 (one restart is no
    median); the best system's own, 900 over 1 restart, is kept beside it."""
    rows = _rows()
    for r, errs in zip(rows, ((900,), ())):
        r["oracle"]["multisent"] = _run(100.0, 1000.0, 0.0)
        r["vad"]["multisent+restart"] = _run(95.0 if r["split"] == "tst-COMMON" else 99.0, 1100.0, 0.0, errs)
    s = bc.summarize(rows, ["de"], ["waitk:k=3"], [*SYSTEMS, ("multisent+restart", "multisent", True)])
    assert s["system"] == "multisent+restart"
    assert s["restart_error_ms_median"] == 40 and s["restart_error_n"] == 4
    assert s["goals"]["restart_error_ms_median"]["met"] is True
    assert s["restart_error_ms_median_system"] == 900 and s["restart_error_n_system"] == 1
    assert s["restart_error_system"] == "multisent+restart waitk:k=3"
    assert ("every system with restarts at every policy (4 restarts); of multisent+restart waitk:k=3 alone (the "
            "reported system, or the best one with restarts when it has none): 900 ms over 1 restart(s)."
            ) in continuous(
        {"config": {"tgt_langs": ["de"], "systems": ["multisent+restart"], "utterances": 5, "vad_min_silence_ms": 250,
                    "max_segment_s": 30, "source_segment_size_ms": 320, "model": "m"}, "rows": rows, "summary": s})


def test_rss_section_states_the_cost_ratio_and_the_rows_it_comes_from():
    """The rendered RSS paragraph: growth 329.1 - 321.4 = 7.7 MiB; CPU ms per chunk 26.9 / 33.3 = 0.81."""
    from docs_render.endless import continuous_rss

    rows = [{"minute": m, "rss_mib": 321.4 if m < 30 else 329.1, "state_elements": 1000, "ms_per_chunk": 30.0,
             "cpu_ms_per_chunk": 29.0, "restarts": m, "words": 10 * m} for m in range(1, 31)]
    rec = {"per_minute": rows, "rss_growth_mib": 7.7, "cpu_ms_per_chunk_start": 33.3, "cpu_ms_per_chunk_end": 26.9,
           "cpu_ms_per_chunk_ratio": 0.808, "cost_window_min": 5, "encoder_left_chunks": 8, "minutes": 30,
           "pause_ms": [0, 100], "segments_closed": 0, "max_segment_s": 1860, "cap_cuts": 0, "policy": "waitk:k=3",
           "langs": ["de"], "encoder_pos_enc_type": "rope"}
    out = continuous_rss({"rss_no_pause": rec, "summary": {"goals": {"rss_growth_mib_30min_no_pause":
                                                                      {"goal": "<= 50", "met": True}}}})
    assert out.startswith("RSS growth from minute 2 to minute 30: **7.7 MiB** (goal <= 50: met); CPU time per chunk, "
                          "median of the last 5 minutes / of minutes 2-6: 26.9 / 33.3 ms = **0.81**.")
    # minutes 1, 2, 5, 10, ..., 30 in the table
    assert [line.split(" | ")[0] for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()] == [
        "| 1", "| 2", "| 5", "| 10", "| 15", "| 20", "| 25", "| 30"]


def test_widened_oracle_segments_gain_silence_not_a_neighbours_speech():
    """Segments (s) [1, 2], [2.1, 3], [4, 5] widened by 0.1: the first starts at 0.9 and ends at the middle of its
    0.1 s pause (2.05), the second starts there and ends at 3.1 (its pause is 1 s), the last starts at 3.9 and
    ends at 5.1; widened by 2 s, the first stops at 0 and the middles bound the rest."""
    segs = [(1.0, 2.0), (2.1, 3.0), (4.0, 5.0)]
    flat = lambda xs: [v for ab in xs for v in ab]  # noqa: E731
    assert flat(bc.widened(segs, 0.1)) == pytest.approx([0.9, 2.05, 2.05, 3.1, 3.9, 5.1])
    assert flat(bc.widened(segs, 2.0)) == pytest.approx([0.0, 2.05, 2.05, 3.5, 3.5, 7.0])
    assert bc.widened(segs, 0.0) == segs


def test_edge_robustness_is_the_worst_ratio_per_model():
    """Widened-oracle BLEU 40 and 90 against oracle 100 and 90: quickstart's worst ratio at wait-3 is 0.4; rows
    without oracle_edge runs add nothing, and the summary carries it; each policy has its own."""
    rows = _rows()
    rows[0]["oracle_edge"] = {"quickstart": _run(40.0, 1000.0, 0.0)}
    rows[1]["oracle_edge"] = {"quickstart": _run(90.0, 900.0, 0.0)}
    assert bc.edge_robustness(rows, ["de"]) == {"quickstart": {"waitk:k=3": pytest.approx(0.4)}}
    assert bc.edge_robustness(_rows(), ["de"]) == {}
    assert bc.summarize(rows, ["de"], ["waitk:k=3"], SYSTEMS)["oracle_edge_bleu_ratio_min"] == {
        "quickstart": {"waitk:k=3": pytest.approx(0.4)}}
    rows[1]["policy"] = "alignatt:frames=4"  # per policy: each its own worst
    assert bc.edge_robustness(rows, ["de"]) == {"quickstart": {"waitk:k=3": pytest.approx(0.4),
                                                               "alignatt:frames=4": pytest.approx(1.0)}}


def _tune_rows():
    """Dev talks at wait-3, oracle 100 (quickstart) on both: VAD BLEU per system and cap (s). quickstart+restart at
    5 s has the best worst ratio (min(0.95, 0.97) = 0.95); at 8 s it ties with quickstart at 20 s on the ratio
    (0.9), which the mean BLEU breaks; multisent at 8 and 5 s tie on both (0.92, mean 93): the longer cap wins that
    tie only if it were the best."""
    vad = [{"quickstart": 90.0, "quickstart@8s": 85.0, "quickstart@5s": 80.0, "quickstart+restart": 70.0,
            "quickstart+restart@8s": 90.0, "quickstart+restart@5s": 95.0},
           {"quickstart": 95.0, "quickstart@8s": 85.0, "quickstart@5s": 80.0, "quickstart+restart": 70.0,
            "quickstart+restart@8s": 91.0, "quickstart+restart@5s": 97.0}]
    return [{"split": "dev", "pause_ms": [0, 100], "policy": "waitk:k=3", "audio_s": 10.0,
             "oracle": {"quickstart": _run(100.0, 1000.0, 0.0)}, "vad": {k: _run(v, 1100.0, 0.0) for k, v in per.items()}}
            for per in vad]


def test_choose_takes_the_best_worst_ratio_over_systems_and_caps_on_the_tuning_talks():
    t = bc.choose(_tune_rows(), ["de"], ["waitk:k=3"], SYSTEMS, [20.0, 8.0, 5.0], 20.0)
    assert t["chosen"] == {"system": "quickstart+restart@5s", "base_system": "quickstart+restart",
                           "model": "quickstart", "restart": True, "policy": "waitk:k=3", "max_segment_s": 5.0}
    by = {(x["base_system"], x["max_segment_s"]): x["bleu_ratio_vs_oracle_min"] for x in t["candidates"]}
    assert by == pytest.approx({("quickstart", 20.0): 0.90, ("quickstart", 8.0): 0.85, ("quickstart", 5.0): 0.80,
                                ("quickstart+restart", 20.0): 0.70, ("quickstart+restart", 8.0): 0.90,
                                ("quickstart+restart", 5.0): 0.95})
    # without the 5 s cap: quickstart 20 s and quickstart+restart 8 s tie at 0.9; the mean BLEU (92.5 > 90.5) decides
    assert bc.choose(_tune_rows(), ["de"], ["waitk:k=3"], SYSTEMS, [20.0, 8.0], 20.0)["chosen"]["system"] == "quickstart"
    # an exact tie on both: the longer cap
    rows = _tune_rows()
    for r in rows:
        r["vad"]["quickstart@8s"] = r["vad"]["quickstart"]
    assert bc.choose(rows, ["de"], ["waitk:k=3"], SYSTEMS[:1], [8.0, 20.0], 20.0)["chosen"]["max_segment_s"] == 20.0
    assert bc.parse_caps("20, 8,5,8") == [20.0, 8.0, 5.0]
    with pytest.raises(ValueError, match="must be > 0"):
        bc.parse_caps("20,0")


def test_summary_reports_the_configuration_chosen_on_dev_not_the_best_on_test():
    """On the test rows quickstart+restart (0.8) beats quickstart (0.5); chosen on dev, quickstart is reported
    with its test numbers, and the goals table says where it was chosen."""
    rows = _rows()
    s = bc.summarize(rows, ["de"], ["waitk:k=3"], SYSTEMS,
                     chosen={"system": "quickstart", "policy": "waitk:k=3"}, chosen_on="dev")
    assert (s["system"], s["chosen_on"]) == ("quickstart", "dev")
    assert s["bleu_ratio_vs_oracle_min"] == pytest.approx(0.5) and s["untranslated_share_max"] == 0.3
    assert bc.summarize(rows, ["de"], ["waitk:k=3"], SYSTEMS)["chosen_on"] == "test"
    with pytest.raises(ValueError, match="has no runs"):
        bc.summarize(rows, ["de"], ["waitk:k=3"], SYSTEMS, chosen={"system": "multisent", "policy": "waitk:k=3"})
    tuning = {"split": "dev", **bc.choose(_tune_rows(), ["de"], ["waitk:k=3"], SYSTEMS, [20.0, 8.0, 5.0], 20.0)}
    text = continuous({"summary": s, "rows": rows, "tuning": tuning,
                       "config": {"tgt_langs": ["de"], "systems": [x[0] for x in SYSTEMS], "utterances": 2,
                                  "model": "M", "vad_min_silence_ms": 250.0, "max_segment_s": 20.0,
                                  "max_segment_grid": [20.0, 8.0, 5.0], "source_segment_size_ms": 320.0,
                                  "tune_utterances": 100}})
    assert "Chosen on the dev talks (100 utterances each" in text and "2 utterances per talk" in text
    assert "**quickstart+restart@5s, waitk:k=3** (cap 5 s)" in text
    assert "| quickstart+restart | waitk:k=3 | 5 | 0.950 | 96.00 |" in text.split("quickstart+restart@5s")[1]
    assert "| measure (reported system: quickstart, waitk:k=3, chosen on dev) | value | goal | met |" in text
