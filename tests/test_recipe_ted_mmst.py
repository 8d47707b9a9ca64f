"""recipes/ted_mmst/run.sh and recipes/synthetic/run_compare.sh end to end at toy scale (CI smoke tests).

The ted recipe synthesizes a MuST-C-layout corpus with MuST-C-like pair disagreements (3 languages,
30 train segments), aligns and preps it, pretrains a tiny English ASR encoder on the ASR view, trains
separate / unified-sync / unified-async from it, averages, evaluates k = 1, 3 and writes the comparison
table. A tiny model (d = 64) and 60 updates are used so that the models emit words (an xs model after
10 updates writes only "▁" pieces, i.e. empty hypotheses, and there would be nothing to score).
The comparison recipe then runs every comparison system on the same prepared DATA (1 seed, 4 updates: it
checks the wiring, not the words).

The recipe run is built once per pytest run, also under pytest-xdist (``ted_run``: file lock + result JSON in
the run's shared temp directory).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

TINY = ("num_threads=1 optim.lr=0.005 optim.warmup_updates=10 valid.interval_updates=60 "
        "checkpoint.save_interval_updates=15 valid.bleu_subset=2 data.max_tokens=3000 "
        "logging.progress_bar=false logging.tensorboard=false model.overrides.d_model=64 "
        "model.overrides.ffn_dim=256 model.overrides.encoder_layers=2 model.overrides.decoder_layers=1 "
        "model.overrides.attention_heads=2 model.overrides.conv_channels=64")


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return env


def _run(script: str, args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", script, *args], cwd=ROOT, env=_env(), text=True, capture_output=True,
                          timeout=timeout)


def _table_rows(md: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith("| system"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows.setdefault(cells[0], cells)
    return rows


def _shared_tmp(tmp_path_factory) -> Path:
    """A directory that every xdist worker of this pytest run sees (the run's base temp directory; without
    xdist, this process's own), so that a fixture can be built once per run rather than once per worker."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _exp_lock(exp: Path):
    """Held while a test reads or reruns the shared recipe run, so that the rerun never rewrites files
    (stage markers, the comparison table) under a test that is reading them on another worker."""
    from filelock import FileLock

    return FileLock(str(exp.parent / "exp.lock"))


#: recipes/ted_mmst/run.sh options of the module's recipe run (``--exp-dir`` is added per run).
TED_ARGS = ["--size", "xs", "--synth-num-train", "30", "--synth-num-dev", "8", "--synth-num-test", "8",
            "--synth-segments-per-talk", "3,5", "--jobs", "2", "--max-update", "60", "--avg-last", "2",
            "--eval-waitk-lagging", "1,3", "--eval-threads", "1", "--eval-max-utterances", "4",
            "--eval-extra", "--max-len-b 12", "--speed-perturb", "true", "--specaugment", "LB",
            "--longform-systems", "unified_sync", "--longform-extra", "--max-len-b 12", "--train-overrides", TINY]


def _run_once(shared: Path, name: str, script_args: list[str], after=None) -> dict:
    """Run ``recipes/ted_mmst/run.sh script_args`` once per pytest run, whichever xdist worker asks first.

    A module fixture is built on every xdist worker that runs one of its tests, and ``xdist_group`` does not
    keep a module's tests on one worker here (pytest-xdist 3.8 on pytest 9 drops the group: xdist#1386). So the
    first worker runs the recipe under a file lock in the run's shared temp directory, calls ``after()`` (still
    under the lock) and writes the outcome to ``<name>.json``; any other worker waits for the lock and reads it.
    ``builds.log`` gets one line per build (two lines for one name = built twice)."""
    from filelock import FileLock

    result = shared / f"{name}.json"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with FileLock(str(shared / f"{name}.lock")):
        if not result.is_file():
            t0 = time.time()
            try:
                p = _run("recipes/ted_mmst/run.sh", script_args)
                rc, out, err = p.returncode, p.stdout, p.stderr
            except subprocess.TimeoutExpired as e:
                out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
                rc, err = 124, f"recipe timed out: {e}"
            if rc == 0 and after is not None:
                after()
            wall = time.time() - t0
            with open(shared / "builds.log", "a") as f:
                f.write(f"{name} {worker} {wall:.0f} s\n")
            result.write_text(json.dumps({"returncode": rc, "stdout": out, "stderr": err, "wall": wall,
                                          "built_by": worker}))
    return json.loads(result.read_text())


def _ted_root(tmp_path_factory) -> Path:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (Debian package espeak-ng)")
    root = _shared_tmp(tmp_path_factory) / "ted_run"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _ted_data_phase(root: Path) -> dict:
    """Stages 0-1 of the module's recipe run (synthesis, alignment, prep), then a copy of its DATA dir
    (``root/data_copy``) for the comparison recipe, taken before stage 2 adds the speed-perturbed copies."""
    exp = root / "exp"
    return _run_once(root, "data", ["--exp-dir", str(exp), *TED_ARGS, "--stop-stage", "1"],
                     after=lambda: shutil.copytree(exp / "data", root / "data_copy", symlinks=True))


@pytest.fixture(scope="module")
def ted_data(tmp_path_factory) -> Path:
    """The prepared DATA dir of the module's recipe run (a copy of stages 0-1's output), built once per
    pytest run: a test that needs only the data waits for stages 0-1, not for the whole recipe."""
    root = _ted_root(tmp_path_factory)
    r = _ted_data_phase(root)
    assert r["returncode"] == 0, r["stdout"][-4000:] + r["stderr"][-4000:]
    return root / "data_copy"


@pytest.fixture(scope="module")
def ted_run(tmp_path_factory):
    """``(exp, args, CompletedProcess, wall_s)`` of one toy recipe run, built ONCE per pytest run (stages 0-1
    with :func:`ted_data`, then stages 2-7; the CompletedProcess holds both runs' output)."""
    root = _ted_root(tmp_path_factory)
    exp = root / "exp"
    args = ["--exp-dir", str(exp), *TED_ARGS]
    first = _ted_data_phase(root)
    if first["returncode"] != 0:
        rest = {"returncode": first["returncode"], "stdout": "", "stderr": "", "wall": 0.0}
    else:
        rest = _run_once(root, "rest", [*args, "--stage", "2"])
    p = subprocess.CompletedProcess(["bash", "recipes/ted_mmst/run.sh", *args], first["returncode"] or rest["returncode"],
                                    first["stdout"] + rest["stdout"], first["stderr"] + rest["stderr"])
    return exp, args, p, first["wall"] + rest["wall"]


@pytest.mark.slow
# one worker for the three tests where xdist honours the group (pytest-xdist 3.8 on pytest 9 does not:
# pytest-dev/pytest-xdist#1386); ted_run is built once per run either way
@pytest.mark.xdist_group("ted_run")
def test_ted_mmst_recipe_all_stages_tiny(ted_run):
    """Slow: it reads the module's recipe run (synthesis, alignment, ASR pretraining, three systems
    trained, averaged and evaluated: over a minute), shared with the two tests below."""
    exp, args, p, wall = ted_run
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    for n in range(8):
        assert f"== Stage {n}:" in p.stdout
    print(f"ted_mmst smoke run: {wall:.0f} s")
    with _exp_lock(exp):  # the rerun test may run on another worker
        # data: the MuST-C-like perturbation was aligned; ASR view shares the features
        rep = json.loads((exp / "data" / "prep_report.json").read_text())
        assert rep["splits"]["tst-COMMON"]["kept"] == 8
        assert (exp / "data_asr" / "fbank80.zip").is_symlink()
        asr_log = (exp / "asr" / "train_log.jsonl").read_text()
        assert '"ctc_loss"' in asr_log
        # --speed-perturb true --specaugment LB: copies built, the ASR view carries them, ASR and ST use both
        assert (exp / "data_asr" / "fbank80_train_sp.zip").is_symlink() and (exp / "data_asr" / "train_sp.tsv").is_file()
        for ck in (exp / "asr" / "checkpoint_last.pt", exp / "models" / "unified_sync" / "seed1" / "checkpoint_last.pt"):
            aug = torch.load(ck, weights_only=True)["config"]["data"]["augment"]
            assert aug["specaugment_policy"] == "LB" and aug["speed_perturb"] == [0.9, 1.0, 1.1]
        for system in ("separate", "unified_sync", "unified_async"):
            d = exp / "models" / system / "seed1"
            assert (d / "checkpoint_avg.pt").is_file()
            log = (d / "train_log.jsonl").read_text()
            assert '"pretrained_encoder"' in log  # initialised from the ASR encoder
            sweep = json.loads((exp / "eval" / system / "seed1" / "scores.json").read_text())
            assert sweep["ks"] == [1, 3] and sweep["langs"] == ["de", "es", "fr"]
        md = (exp / "compare" / "comparison.md").read_text()
        rows = _table_rows(md)
        for system in ("separate", "unified_sync", "unified_async"):
            assert system in rows
        assert "BLEU k=1" in md and "AL k=3" in md
        cmp = json.loads((exp / "compare" / "comparison.json").read_text())
        assert cmp["systems"] == ["separate", "unified_sync", "unified_async"]
        assert all(cmp["params"][s] and cmp["params"][s] > 0 for s in cmp["systems"])
        assert cmp["params"]["separate"] > cmp["params"]["unified_sync"]
        assert any(cmp["results"][s]["avg"] for s in cmp["systems"])  # something was scored
        assert (exp / "compare" / "bleu_al_avg.png").stat().st_size > 1000
        assert "comparison.md" in p.stdout
        # stage 7: whole tst-COMMON talks as streams (one system here)
        lf = json.loads((exp / "eval_longform" / "unified_sync" / "seed1" / "scores.json").read_text())
        assert lf["config"]["n_talks"] >= 2 and set(lf["per_lang"]) == {"de", "es", "fr"}
        assert not (exp / "eval_longform" / "separate").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("ted_run")
def test_ted_mmst_rerun_skips_finished_stages(ted_run):
    """A second run with the same options redoes nothing. (Slow only if it is the first of the module's tests
    to run: then it builds the shared recipe run.)"""
    exp, args, p, _ = ted_run
    assert p.returncode == 0
    with _exp_lock(exp):  # stage 6 rewrites the comparison table that the first test reads
        p2 = _run("recipes/ted_mmst/run.sh", args, timeout=300)
    assert p2.returncode == 0, p2.stderr[-2000:]
    assert p2.stdout.count("already done") == 3  # stages 0-2 have done-markers
    # stages 3-6 skip finished items themselves (so that a new seed or system can be added later)
    assert "-- training" not in p2.stdout and "-- evaluating" not in p2.stdout
    assert p2.stdout.count("already trained") == 3 and p2.stdout.count("already evaluated") == 3
    assert p2.stdout.count("is newer than every checkpoint; skipping") == 3
    assert p2.stdout.count("whole-talk scores exist; skipping") == 1


#: run_compare.sh options of the comparison test. It checks the wiring (systems, sources, parameter counts, the
#: table, an added seed), not quality: 4 updates (checkpoints at 2 and 4, so --avg-last 2 still averages two),
#: one k (a one-k evaluation draws no BLEU-vs-AL plots; the k sweep and its plots are the ted run's, through the
#: same recipes/lib/systems.sh). The near-random models decode non-empty hypotheses, so the table has scores
#: (compare_systems.py fails when no system has any).
COMPARE_SMALL = ["--max-update", "4", "--avg-last", "2", "--eval-waitk-lagging", "3", "--eval-threads", "1",
                 "--eval-max-utterances", "3", "--eval-extra", "--max-len-b 10", "--train-overrides",
                 TINY.replace("valid.interval_updates=60", "valid.interval_updates=4")
                 .replace("checkpoint.save_interval_updates=15", "checkpoint.save_interval_updates=2")]


@pytest.mark.slow
@pytest.mark.xdist_group("ted_run")
def test_synthetic_compare_recipe_tiny(ted_data, tmp_path):
    """run_compare.sh: every comparison system (bilingual x3, separate, unified_sync, async d1/d2 x 2 orders),
    1 seed, on the ted run's prepared DATA; then a seed added later.

    Slow: run_compare.sh trains (4 updates), averages and evaluates 9 tiny models, then one more for an added
    seed: about 30 Python processes, 3 s of `import torch` each."""
    data = ted_data
    out = tmp_path / "cmp"
    t0 = time.time()
    q = _run("recipes/synthetic/run_compare.sh",
             ["--data", str(data), "--exp-dir", str(out), "--seeds", "1", *COMPARE_SMALL])
    assert q.returncode == 0, q.stdout[-4000:] + q.stderr[-4000:]
    print(f"run_compare smoke run: {time.time() - t0:.0f} s")
    cmp = json.loads((out / "compare" / "comparison.json").read_text())
    expected = ["bilingual", "separate", "unified_sync", "async_d1", "async_d2", "async_d1_fr-es-de",
                "async_d2_fr-es-de"]
    assert cmp["systems"] == expected
    assert cmp["sources"]["bilingual"] == [[str(out / "eval" / f"bilingual_{lg}" / "seed1")] for lg in ("de", "es", "fr")]
    rows = _table_rows((out / "compare" / "comparison.md").read_text())
    for s in expected:
        assert s in rows
    # bilingual = three models, each bigger than nothing; separate shares one encoder
    assert cmp["params"]["bilingual"] > cmp["params"]["unified_sync"]
    # adding a seed later trains, averages and evaluates only the new (system, seed)
    q2 = _run("recipes/synthetic/run_compare.sh",
              ["--data", str(data), "--exp-dir", str(out), "--seeds", "1,2", "--systems", "unified_sync",
               *COMPARE_SMALL])
    assert q2.returncode == 0, q2.stdout[-4000:] + q2.stderr[-4000:]
    assert "unified_sync seed 1 already trained" in q2.stdout
    assert "-- training unified_sync (seed 2" in q2.stdout and q2.stdout.count("-- training") == 1
    assert q2.stdout.count("-- evaluating") == 1
    cmp2 = json.loads((out / "compare" / "comparison.json").read_text())
    assert cmp2["systems"] == ["unified_sync"] and len(cmp2["sources"]["unified_sync"][0]) == 2


def test_ted_recipe_help_and_bad_options():
    p = subprocess.run(["bash", "recipes/ted_mmst/run.sh", "--help"], cwd=ROOT, text=True, capture_output=True,
                       timeout=60)
    assert p.returncode == 0
    for opt in ("--stage", "--stop-stage", "--force", "--nproc", "--size", "--mustc-root", "--tgt-langs",
                "--max-update", "--systems", "--seeds", "--eval-waitk-lagging"):
        assert opt in p.stdout
    p = subprocess.run(["bash", "recipes/ted_mmst/run.sh", "--size", "xl"], cwd=ROOT, text=True,
                       capture_output=True, timeout=60, env=_env())
    assert p.returncode == 2 and "--size" in p.stderr
    p = subprocess.run(["bash", "recipes/ted_mmst/run.sh", "--systems", "nonsense"], cwd=ROOT, text=True,
                       capture_output=True, timeout=60, env=_env())
    assert p.returncode == 2 and "unknown system 'nonsense'" in p.stderr


def test_compare_recipe_needs_prepared_data(tmp_path):
    p = subprocess.run(["bash", "recipes/synthetic/run_compare.sh", "--data", str(tmp_path / "none")], cwd=ROOT,
                       text=True, capture_output=True, timeout=60, env=_env())
    assert p.returncode == 2 and "prepare the corpus first" in p.stderr
    p = subprocess.run(["bash", "recipes/synthetic/run_compare.sh", "--help"], cwd=ROOT, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode == 0 and "--seeds" in p.stdout and "--max-update" in p.stdout
