"""Tests for the seen-vs-unseen comparison report (mmst.evaluation.unseen_gap, eval/unseen_gap.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmst.evaluation.compare import CompareError
from mmst.evaluation.unseen_gap import collect, unseen_gap_report

REPO = Path(__file__).resolve().parents[1]
# BLEU per (system, split, seed) for de and es at k = 3
BLEU = {("none", "tst-COMMON"): {1: (98, 96), 2: (97, 97)}, ("none", "tst-unseen"): {1: (88, 86), 2: (90, 84)},
        ("spec", "tst-COMMON"): {1: (98, 97), 2: (96, 97)}, ("spec", "tst-unseen"): {1: (94, 93), 2: (93, 92)},
        ("speed", "tst-COMMON"): {1: (99, 99)}, ("speed", "tst-unseen"): {1: (91, 91)}}


def _write(root: Path) -> Path:
    for (sys_name, split), seeds in BLEU.items():
        for seed, (de, es) in seeds.items():
            d = root / split / sys_name / f"seed{seed}"
            d.mkdir(parents=True)
            per_lang = {"de": {"BLEU": de, "AL": 1500.0}, "es": {"BLEU": es, "AL": 1700.0}}
            (d / "scores.json").write_text(json.dumps({"config": {"waitk": 3}, "per_lang": per_lang}))
    return root


def test_gap_best_system_and_partial_marking(tmp_path):
    ev = _write(tmp_path / "eval")
    rep = unseen_gap_report(collect(ev, ["none", "spec", "speed"]), "none", expected_seeds=[1, 2])
    s = rep["summary"]
    # none: seen (97 + 97) / 2 = 97, unseen (87 + 87) / 2 = 87 -> gap 10
    assert s["unseen_gap_none"] == pytest.approx(10.0)
    # spec: unseen mean (93.5 + 92.5) / 2 = 93 beats speed's 91; seen 97 -> gap 4, change 0
    assert s["best_system"] == "spec" and s["unseen_gap_best"] == pytest.approx(4.0)
    assert s["seen_bleu_change_best"] == pytest.approx(0.0) and s["goal_met"] is True
    assert not s["complete"] and rep["missing"] == ["speed seed 2 tst-COMMON", "speed seed 2 tst-unseen"]
    assert list(rep)[0] == "summary" and rep["systems"]["none"]["seen_bleu"]["std"] == pytest.approx(0.0)
    with pytest.raises(CompareError, match="baseline"):
        unseen_gap_report(collect(ev, ["spec"]), "none")


def test_cli_writes_json_and_md(tmp_path):
    ev = _write(tmp_path / "eval")
    r = subprocess.run([sys.executable, str(REPO / "eval" / "unseen_gap.py"), "--evals-dir", str(ev),
                        "--systems", "none,spec,speed", "--seeds", "1,2", "--out", str(tmp_path / "out" / "augment"),
                        "--command", "test"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "out" / "augment.json").read_text())
    assert rep["summary"]["best_system"] == "spec" and rep["provenance"]["command"] == "test"
    text = (tmp_path / "out" / "augment.md").read_text()
    assert "Partial results" in text and "| spec | 2 | 97.00 ± 0.71 |" in text
