"""The test suite's time budget (docs/development.md): every test that took more than 20 s in the last
recorded full run (``docs/results/test_durations.json``) says why in its docstring, and the causes table of
the durations benchmark names each of them."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DURATIONS = REPO / "docs" / "results" / "test_durations.json"
#: A test slower than this (seconds, setup + call + teardown) states why in its docstring.
SLOW_S = 20.0


def _docstrings() -> dict[str, str]:
    """``{"tests/test_x.py::test_name": docstring}`` of every test function in ``tests/``."""
    out = {}
    for path in sorted((REPO / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                out[f"tests/{path.name}::{node.name}"] = ast.get_docstring(node) or ""
    return out


def _slow_ids() -> list[str]:
    if not DURATIONS.is_file():
        pytest.skip(f"{DURATIONS} not found")
    rows = json.loads(DURATIONS.read_text())["slowest"]
    return sorted({r["id"].split("[")[0] for r in rows if r["seconds"] > SLOW_S})


def test_every_test_over_the_threshold_says_why():
    docs = _docstrings()
    slow = _slow_ids()
    assert slow, "the recorded run has no test over 20 s: the check below would test nothing"
    missing = [t for t in slow if t in docs and "Slow:" not in docs[t] and "slow" not in docs[t].lower()]
    assert not missing, f"tests over {SLOW_S:.0f} s without a word on why in their docstring: {missing}"


def test_every_recorded_slow_test_has_a_named_cause():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from bench_test_durations import cause_of
    finally:
        sys.path.remove(str(REPO / "bench"))
    assert cause_of("tests/test_recipe_synthetic.py::test_synthetic_recipe_all_stages_tiny").startswith(
        "recipes/synthetic/run.sh, every stage")
    assert cause_of("tests/test_no_such_file.py::test_x") == "other"
    assert [t for t in _slow_ids() if cause_of(t) == "other"] == []


def test_junit_ids_outcomes_and_totals_are_read_as_pytest_writes_them(tmp_path):
    """A hand-written JUnit XML in pytest's layout: node ids rebuilt from classname/name, outcomes, and the
    totals and per-file sums computed from them."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from bench_test_durations import parse_junit, summarize
    finally:
        sys.path.remove(str(REPO / "bench"))
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_a" name="test_one" time="2.5"/>'
        '<testcase classname="tests.test_a.TestK" name="test_two[x]" time="30.0"><failure message="m"/></testcase>'
        '<testcase classname="tests.test_b" name="test_three" time="0.5"><skipped message="s"/></testcase>'
        '</testsuite></testsuites>')
    rows = parse_junit(xml)
    assert [(r["id"], r["outcome"]) for r in rows] == [
        ("tests/test_a.py::test_one", "passed"), ("tests/test_a.py::TestK::test_two[x]", "failed"),
        ("tests/test_b.py::test_three", "skipped")]
    s = summarize(rows, wall_s=20.04, top=2)
    assert s["totals"] == {"wall_s": 20.0, "sum_test_s": 33.0, "tests": 3, "passed": 1, "failed": 1, "error": 0,
                           "skipped": 1}
    assert [r["id"] for r in s["slowest"]] == ["tests/test_a.py::TestK::test_two[x]", "tests/test_a.py::test_one"]
    assert s["by_file"] == {"tests/test_a.py": 32.5, "tests/test_b.py": 0.5}


def test_an_imported_run_records_digests_only_when_this_checkout_is_its_commit(tmp_path):
    """``--junit --commit C`` (a CI run imported afterwards) can record the file digests only when the files
    here are C's: equal after a commit; not after an edit of a tracked file, an added untracked file, or for a
    commit that does not exist."""
    import subprocess

    sys.path.insert(0, str(REPO / "bench"))
    try:
        from bench_test_durations import tree_matches_commit
    finally:
        sys.path.remove(str(REPO / "bench"))

    def git(*a):
        return subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "mmst").mkdir()
    (tmp_path / "mmst" / "a.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("outside the paths\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c1")
    c1 = git("rev-parse", "HEAD")
    paths = ("mmst/",)
    assert tree_matches_commit(c1, paths, tmp_path)
    (tmp_path / "notes.txt").write_text("an edit outside the paths does not count\n")
    assert tree_matches_commit(c1, paths, tmp_path)
    (tmp_path / "mmst" / "a.py").write_text("x = 2\n")
    assert not tree_matches_commit(c1, paths, tmp_path)
    (tmp_path / "mmst" / "a.py").write_text("x = 1\n")
    (tmp_path / "mmst" / "b.py").write_text("y = 1\n")
    assert not tree_matches_commit(c1, paths, tmp_path)
    (tmp_path / "mmst" / "b.py").unlink()
    assert tree_matches_commit(c1, paths, tmp_path)
    assert not tree_matches_commit("0" * 40, paths, tmp_path)
