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
