"""recipes/synthetic/run_policies_hard.sh end to end on a tiny untrained checkpoint (stages 0-4): the
sweeps resume, and the results JSON (summary first), Markdown, plots and the docs section are written; its
options (training seeds, tune and test splits) and their checks; its job pool (sweeps side by side)."""

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


def _help_values(*argv: str) -> dict[str, str]:
    p = subprocess.run(["bash", "recipes/synthetic/run_policies_hard.sh", *argv, "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return dict(line.split(None, 1) for line in p.stdout.splitlines()[2:] if len(line.split(None, 1)) == 2)


def test_help_lists_seeds_and_the_tune_and_test_splits():
    """Training seeds, the split the grids and the cap are tuned on and the split(s) reported on are options."""
    values = _help_values()
    assert values["--seeds"] == "1,2" and values["--tune-split"] == "dev" and values["--test-split"] == "tst-COMMON"
    assert _help_values("--seeds", "3,4", "--test-split", "tst-COMMON,tst-unseen")["--test-split"] == "tst-COMMON,tst-unseen"


def test_tuning_and_reporting_on_one_split_is_refused(tmp_path):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    p = subprocess.run(["bash", "recipes/synthetic/run_policies_hard.sh", "--exp-dir", str(tmp_path / "exp"),
                        "--test-split", "tst-COMMON,dev"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--test-split dev is the --tune-split" in p.stderr and p.stdout == ""
    assert not (tmp_path / "exp").exists()


@pytest.mark.slow
def test_policies_recipe_on_tiny_models(tmp_path):
    """Slow (about 50-70 s on 2 cores): the recipe evaluates every policy over its grid on a tiny model in
    subprocesses, for two training seeds, on the tune split and the test split, then resumes; each evaluation is
    its own Python process, which is where the time goes."""
    import torch
    from eval_fixtures import make_tiny_system

    torch.set_num_threads(1)
    tiny = make_tiny_system(tmp_path / "sys", langs=("de", "es"), size_overrides={"src_vocab_size": 16})
    exp = tmp_path / "exp"
    shutil.copytree(tiny["data"], exp / "data")
    shutil.copy(exp / "data" / "tst-COMMON.tsv", exp / "data" / "dev.tsv")   # the tune split (same utterances here)
    # seed 1 in the single-seed layout of older experiment folders, seed 2 in the per-seed one
    for d in (exp / "models" / "offline", exp / "models" / "offline" / "seed2"):
        d.mkdir(parents=True)
        shutil.copy(tiny["ckpt"], d / "checkpoint_last.pt")
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
    assert "offline seed 1: reusing" in p.stdout and "offline seed 2: reusing" in p.stdout
    pol = exp / "policies"
    assert (pol / "dev" / "coverage.json").is_file() and "chosen on this split" in (pol / "dev" / "coverage.md").read_text()
    assert not (pol / "dev" / "offline" / "seed2").exists()   # tuning: the first seed only
    assert {d.name for d in (pol / "tst-COMMON" / "offline").iterdir() if d.is_dir()} == {"seed1", "seed2"}
    obj = json.loads(res_json.read_text())
    assert next(iter(obj)) == "summary"
    s = obj["summary"]
    assert s["seeds"] == [1, 2] and s["test_split"] == "tst-COMMON" and s["tune_split"] == "dev"
    assert set(s["langs_adaptive_beats_waitk_offline_model"]) == {"k3", "k5"}
    assert all(0 <= v <= 2 for v in s["langs_adaptive_beats_waitk_offline_model"].values())
    assert set(s["best_policy_per_lang"]) == {"de", "es"}
    assert obj["n_utterances"] == 2 and set(obj["sweeps"]["offline"]) == {"waitk", "alignatt-layer0", "edatt", "la",
                                                                            "holdn", "ctcwaitk"}
    assert s["metric"] == "LAAL" and s["points_per_policy_min"] == 2 and s["min_length_ratio"] is not None
    eq = obj["equal_latency"]["offline"]["LAAL"]["k3"]["de"]
    wk = [p for p in obj["sweeps"]["offline"]["waitk"]["points"] if p["params"]["k"] == 3][0]
    # both seeds decode the same checkpoint: the mean over seeds is seed 1's number
    assert eq["waitk"]["BLEU"] == wk["per_lang"]["de"]["BLEU"] and set(eq["per_seed"]) == {"seed1", "seed2"}
    # a per-model grid ("MODEL:GRID ...") sweeps the grid of that model
    assert [p["params"]["n"] for p in obj["sweeps"]["offline"]["holdn"]["points"]] == [1, 8]
    assert (tmp_path / "img" / "p_offline.png").stat().st_size > 1000  # named after --out-json
    assert "first 2 utterances" in res_md.read_text() and "best at k=3 LAAL" in res_md.read_text()
    # resumable: a second run skips every finished sweep
    p2 = subprocess.run(cmd + ["--stage", "1", "--stop-stage", "3"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=600)
    # offline x 2 seeds, 6 sweeps on dev (seed 1), 6 sweeps x 2 seeds on tst-COMMON
    assert p2.returncode == 0 and p2.stdout.count(": done (") == 2 + 6 + 12
    # a per-model grid that names no grid for a model being swept is an error that names the model
    (pol / "tst-COMMON" / "offline" / "seed1" / "holdn" / "scores.json").unlink()
    bad = cmd + ["--stage", "3", "--stop-stage", "3", "--policies", "holdn", "--holdn-args", "multik:n=2"]
    p3 = subprocess.run(bad, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p3.returncode != 0 and "no grid for model offline in 'multik:n=2'" in p3.stderr


def _pool(script: str, tmp_path) -> subprocess.CompletedProcess:
    """``script`` under ``set -euo pipefail`` with the recipe's job-pool block loaded alone, in ``tmp_path``."""
    pool = "source <(sed -n '/^# ---- job pool: begin/,/^# ---- job pool: end/p' recipes/synthetic/run_policies_hard.sh)"
    return subprocess.run(["bash", "-c", f"set -euo pipefail; {pool}; type pool_add >/dev/null; cd {tmp_path}; {script}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_job_pool_starts_the_next_job_when_any_one_ends_not_the_oldest(tmp_path):
    """Two slots, three jobs: ``a`` waits until ``c`` has run; ``b`` ends at once. A pool that waits for the oldest
    job (``a``) before starting ``c`` never ends (the timeout fails the test); one that refills the slot ``b`` freed
    runs ``c``, which releases ``a``."""
    script = ("job() { case $1 in a) while [ ! -f released ]; do sleep 0.05; done; echo a >> order;; "
              "c) echo c >> order; touch released;; *) echo $1 >> order;; esac; }; "
              "pool_add 2 job a; pool_add 2 job b; pool_add 2 job c; pool_wait; echo ok")
    p = _pool(script, tmp_path)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stderr
    assert (tmp_path / "order").read_text().split() == ["b", "c", "a"]


def test_job_pool_stops_starting_jobs_after_a_failure_and_reports_it(tmp_path):
    """One slot: ``bad`` fails (its ``set -e`` intact: the command after the failing one never runs), so the next
    ``pool_add`` starts nothing and ``pool_wait`` returns 1; a second round on the same pool starts clean. Under
    ``set -e`` a recipe stops at that ``pool_wait``."""
    script = ("job() { echo $1 >> order; [ $1 != bad ]; echo $1-end >> order; }; "
              "pool_add 1 job ok1; pool_add 1 job bad; pool_add 1 job never; "
              "pool_wait || echo failed; pool_add 1 job again; pool_wait && echo clean")
    p = _pool(script, tmp_path)
    assert p.stdout.split() == ["failed", "clean"], p.stderr
    assert (tmp_path / "order").read_text().split() == ["ok1", "ok1-end", "bad", "again", "again-end"]
    p = _pool("job() { [ $1 != bad ]; }; pool_add 2 job bad; pool_add 2 job ok; pool_wait; echo not-reached", tmp_path)
    assert p.returncode == 1 and "not-reached" not in p.stdout
