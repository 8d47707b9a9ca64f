"""recipes/synthetic/run_offline_unified_vs_separate.sh and run_waitk_hard.sh end to end at toy scale: every stage runs and
writes its comparison table (the README's experiment commands, minus the budget)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: A near-random model never emits EOS: every decode runs to its length cap. valid.max_len_a=0 keeps the
#: validation BLEU decode at valid.max_len_b (10) tokens instead of 1 token per encoder state plus 10 (the recipe
#: sets valid.max_len_a=1.0; overrides given later win).
TINY_TRAIN = ("valid.bleu_subset=4 valid.max_len_a=0 data.max_tokens=3000 logging.progress_bar=false "
              "logging.tensorboard=false model.overrides.d_model=48 model.overrides.encoder_layers=1 "
              "model.overrides.decoder_layers=1 model.overrides.ffn_dim=64 model.overrides.conv_channels=48 "
              "model.overrides.attention_heads=2")


def _run(script: str, args: list[str]) -> subprocess.CompletedProcess:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (Debian package espeak-ng); `make setup` installs it as root")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return subprocess.run(["bash", script, *args], cwd=ROOT, env=env, text=True, capture_output=True, timeout=900)


@pytest.mark.slow
def test_offline_unified_vs_separate_recipe_tiny(tmp_path):
    """Slow: the recipe trains and evaluates two tiny models in subprocesses."""
    exp = tmp_path / "offline_archs"
    p = _run("recipes/synthetic/run_offline_unified_vs_separate.sh", [
        "--exp-dir", str(exp), "--tgt-langs", "de,ja", "--num-train", "16", "--num-dev", "4", "--num-test", "4",
        "--num-test-unseen", "3", "--jobs", "1", "--offline-minutes", "0.01",
        "--train-overrides", f"optim.max_update=50 {TINY_TRAIN}",
        # 0.6 s of training teaches nothing: each hypothesis runs to the length cap (200 tokens by default)
        "--eval-extra", "--max-len-b 10"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for n in range(5):
        assert f"== Stage {n}:" in p.stdout
    for split, n_utt in (("tst-COMMON", 4), ("tst-unseen", 3)):
        cmp = json.loads((exp / f"compare_{split}" / "comparison.json").read_text())
        assert "unified_offline" in json.dumps(cmp) and "separate_offline" in json.dumps(cmp)
        sc = json.loads((exp / "eval" / split / "separate_offline" / "offline" / "scores.json").read_text())
        assert sc["config"]["split"] == split and sc["timing"]["n_utterances"] == n_utt
    # the time limit, not max_update, ended training (0.01 min = 0.6 s of training)
    ck = [json.loads(x) for x in (exp / "models" / "unified_offline" / "train_log.jsonl").read_text().splitlines()]
    last = [r for r in ck if r["kind"] == "train"][-1]
    assert last["update"] < 50 and last["train_time_s"] >= 0.6


@pytest.mark.slow
def test_waitk_hard_recipe_tiny(tmp_path):
    """Slow: the recipe synthesizes a corpus, trains two tiny models and evaluates them, in subprocesses."""
    exp = tmp_path / "hard"
    p = _run("recipes/synthetic/run_waitk_hard.sh", [
        "--exp-dir", str(exp), "--tgt-langs", "de,ja", "--num-train", "16", "--num-dev", "4", "--num-test", "4",
        "--jobs", "1", "--max-update", "3", "--train-jobs", "2", "--eval-waitk-lagging", "1,3", "--train-overrides", TINY_TRAIN,
        # 3 updates teach nothing: --min-len keeps the hypotheses non-empty so every table cell has a score, and
        # --max-len-a 0 --max-len-b 10 (after the recipe's --max-len-a 1.0: the last one wins) stops each at 10
        # tokens instead of 1 per encoder state plus 200
        "--eval-extra", "--min-len 2 --max-len-a 0 --max-len-b 10"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    cmp = (exp / "compare" / "comparison.md").read_text()
    assert "offline-trained" in cmp and "multi-k" in cmp
    for name in ("offline", "multik"):
        assert (exp / "eval" / name / "k3" / "scores.json").is_file()
        assert json.loads((exp / "eval" / name / "offline" / "scores.json").read_text())["config"]["offline"]
    assert (exp / "compare" / "bleu_al_de.png").stat().st_size > 1000
