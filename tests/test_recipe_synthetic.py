"""recipes/synthetic/run.sh end to end at toy scale: every stage runs, is skipped on rerun, and writes
the table, the plot, the real-speech outputs of a user list (--real-audio-tsv) and the exported model
folder (the README's `make demo` path, minus the budget)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _real_audio_list(d: Path) -> Path:
    """Two speech-like clips with de and ja references, in the prep_audio_list.py format."""
    import numpy as np
    import soundfile as sf

    d.mkdir(parents=True)
    t = np.arange(24000) / 16000
    for i in range(2):
        x = 0.3 * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) * np.sin(2 * np.pi * (140 + 30 * i) * t)
        sf.write(d / f"clip{i}.wav", x.astype(np.float32), 16000)
    (d / "list.tsv").write_text("id\taudio\ten\tde\tja\n" + "".join(
        f"r{i}\tclip{i}.wav\tthe cat\tdie katze\t猫\n" for i in range(2)), encoding="utf-8")
    return d / "list.tsv"


def _venv_env() -> dict:
    """This environment with the test's Python first on PATH (recipes stop when `python` lacks mmst)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "recipes/synthetic/run.sh", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=900)


@pytest.mark.slow
def test_synthetic_recipe_all_stages_tiny(tmp_path):
    """Slow: every stage of the quickstart recipe at toy scale (espeak synthesis, prep, speed
    perturbation, ASR pretraining, training, evaluation, long form, export), then two reruns; each step is
    a Python process (about 15, 3 s of `import torch` each)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (Debian package espeak-ng); `make setup` installs it as root")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    exp = tmp_path / "exp"
    args = ["--exp-dir", str(exp), "--tgt-langs", "de,ja", "--num-train", "24", "--num-dev", "6",
            "--num-test", "6", "--num-test-unseen", "4", "--eval-waitk-lagging", "1,3", "--jobs", "1", "--longform-minutes", "0.3",
            "--real-audio-tsv", str(_real_audio_list(tmp_path / "real")),
            # 6 updates teach nothing: the model writes "▁" pieces up to the length cap (200 tokens by default,
            # most of this test's time); 10 is plenty for checking what the stages write
            "--eval-extra", "--max-len-b 10", "--longform-extra", "--max-len-b 10",
            # the augmentation switches: speed-perturbed copies, SpecAugment, ASR pretraining (same overrides)
            "--speed-perturb", "true", "--specaugment", "LB", "--asr-pretrain", "true",
            "--train-overrides", "optim.max_update=6 optim.warmup_updates=2 valid.interval_updates=3 "
            "checkpoint.save_interval_updates=3 valid.bleu_subset=4 data.max_tokens=3000 "
            "logging.progress_bar=false"]
    p = _run(args, env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for n in range(5):
        assert f"== Stage {n}:" in p.stdout
    # auto: the OMP_WAIT_POLICY of the environment wins (importing mmst set one in this test process)
    assert f"-- training with OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']} (--omp-wait-policy auto)" in p.stdout
    assert (exp / "eval" / "latency_quality.png").stat().st_size > 1000
    # the copies exist, the ASR run trained on them, the ST model started from its encoder
    n_train = len((exp / "data" / "train.tsv").read_text().splitlines()) - 1
    assert len((exp / "data" / "train_sp.tsv").read_text().splitlines()) - 1 == 3 * n_train
    asr_cfg = torch.load(exp / "asr" / "checkpoint_best.pt", weights_only=True)["config"]
    assert asr_cfg["data"]["augment"] == {"specaugment_policy": "LB", "specaugment": None,
                                          "speed_perturb": [0.9, 1.0, 1.1]}
    st_log = (exp / "model" / "train_log.jsonl").read_text()
    assert '"pretrained_encoder"' in st_log
    scores = json.loads((exp / "eval" / "scores.json").read_text())
    assert "de" in json.dumps(scores) and "ja" in json.dumps(scores)
    assert "latency_quality.png" in p.stdout
    unseen = json.loads((exp / "eval_unseen" / "scores.json").read_text())
    assert unseen["config"]["split"] == "tst-unseen" and unseen["timing"]["n_utterances"] == 4
    assert "tst-unseen, wait-3" in p.stdout
    # stage 6: a synthetic talk streamed as one stream, scored by resegmentation
    lf = json.loads((exp / "eval_longform" / "scores.json").read_text())
    assert lf["audio_s"] >= 18 and set(lf["per_lang"]) == {"de", "ja"} and "Long-form results" in p.stdout
    # scored both ways, SoftSegmenter (OmniSTEval) and mWER; this model is untrained and writes no word, hence
    # no latency columns (a trained one gets LongYAAL and LongYAAL_CA first, then StreamLAAL after BLEU)
    assert "SoftSeg_BLEU | SoftSeg_chrF | BLEU |" in p.stdout
    assert lf["per_lang"]["de"]["info"]["omnisteval_command"].startswith("omnisteval longform --speech_segmentation")
    assert lf["config"]["sentence_restart"] and "Untranslated speech share" in p.stdout
    # stage 5: the user's list, prepared with the training vocabulary and evaluated
    real = json.loads((exp / "eval_real_audio" / "scores.json").read_text())
    assert real["config"]["tgt_langs"] == ["de", "ja"] and real["timing"]["n_utterances"] == 2
    # stage 7: the model folder, which loads and names the scores of stage 3
    folder = exp / "model_export"
    assert {"config.json", "model.safetensors", "gcmvn.npz", "spm_joint.model", "README.md"} <= {
        q.name for q in folder.iterdir()}
    assert "mmst-serve --model" in p.stdout and "## Scores" in (folder / "README.md").read_text()
    from mmst.models.checkpoint import load_model

    assert load_model(folder)[0].tgt_langs == ["de", "ja"]
    # rerun: every finished stage is skipped
    p2 = _run(args + ["--stop-stage", "2"], env)
    assert p2.returncode == 0, p2.stderr[-2000:]
    assert p2.stdout.count("already done") == 3
    # docs/recipes.md's "re-evaluate only", as written there (other k): stage 3 alone runs again
    documented = next(line.split("run.sh", 1)[1].split("#")[0].split() for line in
                      (ROOT / "docs" / "recipes.md").read_text().splitlines() if line.endswith("# re-evaluate only"))
    k = documented.index("--eval-waitk-lagging") + 1
    documented[k] = "3"
    p3 = _run(args + documented, env)
    assert p3.returncode == 0, p3.stderr[-2000:]
    assert "== Stage 3:" in p3.stdout and "== Stage 4:" not in p3.stdout and "already done" not in p3.stdout
    assert json.loads((exp / "eval" / "scores.json").read_text())["config"]["waitk"] == 3


def test_recipe_without_real_audio_list_says_how_in_one_line(tmp_path):
    """Stage 5 without --real-audio-tsv prints one line and needs no shared data."""
    p = _run(["--exp-dir", str(tmp_path / "exp"), "--stage", "5", "--stop-stage", "5"], _venv_env())
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [ln for ln in p.stdout.splitlines() if "--real-audio-tsv" in ln]
    assert len(lines) == 1 and "Stage 5 skipped" in lines[0]
    assert not (tmp_path / "exp" / ".done" / "stage5").exists()


def test_recipe_rejects_unknown_option():
    p = subprocess.run(["bash", "recipes/synthetic/run.sh", "--no-such-option", "1"], cwd=ROOT, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode == 2
    assert "unknown option '--no-such-option'" in p.stderr


def test_recipe_rejects_a_bad_omp_wait_policy():
    p = subprocess.run(["bash", "recipes/synthetic/run.sh", "--omp-wait-policy", "spin"], cwd=ROOT, text=True,
                       capture_output=True, timeout=60, env=_venv_env())
    assert p.returncode == 2
    assert "--omp-wait-policy must be auto, active or passive (got 'spin')" in p.stderr


def test_recipe_help_lists_every_option():
    p = subprocess.run(["bash", "recipes/synthetic/run.sh", "--help"], cwd=ROOT, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode == 0
    for opt in ("--stage", "--stop-stage", "--force", "--nproc", "--omp-wait-policy", "--tgt-langs", "--eval-waitk-lagging", "--specaugment",
                "--speed-perturb", "--asr-pretrain", "--real-audio-tsv"):
        assert opt in p.stdout


def test_augment_recipe_help_and_bad_input(tmp_path):
    p = subprocess.run(["bash", "recipes/synthetic/run_augment.sh", "--help"], cwd=ROOT, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode == 0
    for opt in ("--systems", "--seeds", "--specaugment", "--speed-factors", "--asr-config", "--copy-to"):
        assert opt in p.stdout
    p = subprocess.run(["bash", "recipes/synthetic/run_augment.sh", "--data", str(tmp_path)], cwd=ROOT, text=True,
                       capture_output=True, timeout=60, env=_venv_env())
    assert p.returncode == 2 and "prepare the corpus first" in p.stderr
