"""recipes/lib/stages.sh: the recipes stop at once when ``python`` cannot import mmst, and a finished stage
reruns when an option it uses has changed."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = Path("/usr/bin/python3")
FIX = "run 'source .venv/bin/activate' first (make setup creates .venv)"


def _system_python_lacks_mmst() -> bool:
    return SYSTEM_PYTHON.exists() and subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import mmst"], cwd="/", capture_output=True).returncode != 0


@pytest.mark.skipif(not _system_python_lacks_mmst(), reason="needs a python without mmst at /usr/bin/python3")
def test_recipe_without_mmst_stops_with_one_line(tmp_path):
    """A ``python`` on PATH that lacks mmst (or none at all): exit 2 and one line naming the fix; ``--help``
    still works."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(SYSTEM_PYTHON)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    cmd = ["bash", "recipes/synthetic/run.sh", "--exp-dir", str(tmp_path / "exp")]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [
        f"recipes/synthetic/run.sh: python cannot import mmst (python is {bin_dir}/python): {FIX}"]
    assert not (tmp_path / "exp").exists()
    p = subprocess.run([*cmd, "--help"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stderr == "" and "--eval-waitk-lagging" in p.stdout

    no_python = tmp_path / "no_python"
    no_python.mkdir()
    for tool in ("dirname",):
        (no_python / tool).symlink_to(shutil.which(tool))
    p = subprocess.run(["/bin/bash", "recipes/ted_mmst/run.sh"], cwd=REPO, env={**env, "PATH": str(no_python)},
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [f"recipes/ted_mmst/run.sh: no python on PATH: {FIX}"]


def test_every_recipe_goes_through_parse_options():
    """Every recipe sources recipes/lib/stages.sh and calls parse_options (which ends with the mmst check)."""
    recipes = sorted(REPO.glob("recipes/*/run*.sh"))
    assert len(recipes) >= 9
    for path in recipes:
        text = path.read_text()
        assert "source recipes/lib/stages.sh" in text and "\nparse_options \"$@\"\n" in text, path


FAKE_RECIPE = """#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")"
source {stages}
stage=0
stop_stage=1
force=false
exp_dir=exp
a=1
b=x
RECIPE_OPTIONS=(stage stop_stage force exp_dir a b)
parse_options "$@"
label="b is $b"
say() {{ echo "$label"; }}
stage0() {{ echo "a is $a"; }}
stage1() {{ say; }}
run_stage 0 "uses a" stage0
run_stage 1 "uses b through a function and a variable derived from it" stage1
"""


def test_finished_stage_reruns_when_an_option_it_uses_changed(tmp_path):
    """The done-marker's sibling stageN.options records the options the stage uses (found in its body, the
    functions it calls and the variables derived from options); a changed one reruns that stage only."""
    recipe = tmp_path / "run.sh"
    recipe.write_text(FAKE_RECIPE.format(stages=REPO / "recipes/lib/stages.sh"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def run(*args):
        p = subprocess.run(["bash", str(recipe), *args], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return [line for line in p.stdout.splitlines() if not line.startswith(("==", "-- stage"))]

    assert run() == ["a is 1", "b is x"]
    done = tmp_path / "exp/.done"
    assert (done / "stage0").read_text().strip().isdigit()   # the seconds, as tools/collect_quickstart.py reads
    assert (done / "stage0.options").read_text() == "a=1\n"
    assert (done / "stage1.options").read_text() == "b=x\n"
    assert run() == ["stage 0 already done (exp/.done/stage0); skipping (use --force true to redo)",
                     "stage 1 already done (exp/.done/stage1); skipping (use --force true to redo)"]
    assert run("--b", "y") == ["stage 0 already done (exp/.done/stage0); skipping (use --force true to redo)",
                               "stage 1: options changed since it ran (--b x -> y); running it again",
                               "b is y"]
    assert (done / "stage1.options").read_text() == "b=y\n"
    assert run("--b", "") == ["stage 0 already done (exp/.done/stage0); skipping (use --force true to redo)",
                              "stage 1: options changed since it ran (--b y -> ''); running it again",
                              "b is "]
    (done / "stage1.options").unlink()   # a marker written before the options were recorded: skipped as before
    assert run("--b", "z")[1] == "stage 1 already done (exp/.done/stage1); skipping (use --force true to redo)"
