"""recipes/synthetic/run_policies_hard.sh end to end on a tiny untrained checkpoint (stages 1-3): the
sweeps resume, and the results JSON (summary first), Markdown, plots and the docs section are written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


@pytest.mark.slow
def test_policies_recipe_on_tiny_models(tmp_path):
    """Slow: the recipe evaluates every policy over its grid on two tiny models, in subprocesses."""
    import torch
    from eval_fixtures import make_tiny_system

    torch.set_num_threads(1)
    tiny = make_tiny_system(tmp_path / "sys", langs=("de", "es"), size_overrides={"src_vocab_size": 16})
    exp = tmp_path / "exp"
    shutil.copytree(tiny["data"], exp / "data")
    for m in ("offline",):
        (exp / "models" / m).mkdir(parents=True)
        shutil.copy(tiny["ckpt"], exp / "models" / m / "checkpoint_last.pt")
    res_json, res_md = tmp_path / "res" / "p.json", tmp_path / "res" / "p.md"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    cmd = ["bash", str(ROOT / "recipes/synthetic/run_policies_hard.sh"), "--exp-dir", str(exp), "--tgt-langs", "de,es",
           "--models", "offline", "--eval-max-utterances", "2", "--waitk-args", "k=1,3,5", "--alignatt-args", "frames=1,20",
           "--edatt-args", "alpha=0.05,0.9,frames=1", "--la-args", "n=1,3", "--holdn-args", "multik:n=2 offline:n=1,8",
           "--ctcwaitk-args", "k=1,6", "--policies", "waitk alignatt-layer0 edatt la holdn ctcwaitk",
           "--out-json", str(res_json), "--out-md", str(res_md),
           "--plot-dir", str(tmp_path / "img")]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "reusing" in p.stdout
    obj = json.loads(res_json.read_text())
    assert next(iter(obj)) == "summary"
    s = obj["summary"]
    assert set(s["langs_adaptive_beats_waitk_offline_model"]) == {"k3", "k5"}
    assert all(0 <= v <= 2 for v in s["langs_adaptive_beats_waitk_offline_model"].values())
    assert set(s["best_policy_per_lang"]) == {"de", "es"}
    assert obj["n_utterances"] == 2 and set(obj["sweeps"]["offline"]) == {"waitk", "alignatt-layer0", "edatt", "la",
                                                                            "holdn", "ctcwaitk"}
    assert s["metric"] == "LAAL" and s["points_per_policy_min"] == 2 and s["min_length_ratio"] is not None
    eq = obj["equal_latency"]["offline"]["LAAL"]["k3"]["de"]
    wk = [p for p in obj["sweeps"]["offline"]["waitk"]["points"] if p["params"]["k"] == 3][0]
    assert eq["waitk"]["BLEU"] == wk["per_lang"]["de"]["BLEU"]
    # a per-model grid ("MODEL:GRID ...") sweeps the grid of that model
    assert [p["params"]["n"] for p in obj["sweeps"]["offline"]["holdn"]["points"]] == [1, 8]
    assert (tmp_path / "img" / "policies_hard_offline.png").stat().st_size > 1000
    assert "first 2 utterances" in res_md.read_text() and "best at k=3 LAAL" in res_md.read_text()
    # resumable: a second run skips every finished sweep
    p2 = subprocess.run(cmd + ["--stage", "1", "--stop-stage", "2"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=600)
    assert p2.returncode == 0 and p2.stdout.count(": done (") == 7
    # a per-model grid that names no grid for a model being swept is an error that names the model
    (exp / "policies" / "offline" / "holdn" / "scores.json").unlink()
    bad = cmd + ["--stage", "2", "--stop-stage", "2", "--policies", "holdn", "--holdn-args", "multik:n=2"]
    p3 = subprocess.run(bad, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p3.returncode != 0 and "no grid for model offline in 'multik:n=2'" in p3.stderr
