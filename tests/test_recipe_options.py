"""recipes/lib/stages.sh: the recipes stop at once when ``python`` cannot import mmst, and a finished stage
reruns when an option it uses has changed."""

import os
import shutil
import subprocess
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
