"""What a result records as the code that ran (mmst.provenance): syntax-tree digests, the modules a run and its
child processes imported, the ``--stale`` report naming the changed file, and the benchmarks' record at start.

Edits happen in a small package under ``tmp_path`` (imported under a name no other test uses), never in the
repository.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

import render_docs  # noqa: E402

from mmst import provenance  # noqa: E402

USED = '''"""The module the run imports."""

import argparse


def scale(x):
    """Twice ``x``."""
    # doubling
    return 2 * x


def parser():
    p = argparse.ArgumentParser(description="scales numbers")
    p.add_argument("--x", type=int, default=1, help="the number " + "to scale")
    return p
'''
UNUSED = '''"""A module of the same package that the run never imports."""

VALUE = 3
'''


def test_syntax_digest_ignores_docstrings_comments_and_help_text():
    d = provenance.source_digest("m.py", USED.encode())
    same = (USED.replace("Twice ``x``.", "Two times x.").replace("# doubling", "# x2")
            .replace('"scales numbers"', '"doubles"').replace('"the number " + "to scale"', 'f"n {1}"')
            .replace('"""The module the run imports."""\n', ""))
    assert provenance.source_digest("m.py", same.encode()) == d
    for code in (USED.replace("2 * x", "3 * x"), USED.replace("default=1", "default=2"),
                 USED.replace("import argparse", "import argparse\nimport os")):
        assert provenance.source_digest("m.py", code.encode()) != d, code
    # not Python, or Python that does not parse: the bytes
    assert provenance.source_digest("m.yaml", b"a: [1\n") == provenance.source_digest("m.py", b"a: [1\n")
    assert provenance.source_digest("m.yaml", b"a: 1 # x\n") != provenance.source_digest("m.yaml", b"a: 1\n")


@pytest.fixture
def run_tree(tmp_path, monkeypatch):
    """A checkout under ``tmp_path``: package ``prov_case_pkg`` (``used`` imported by the run, ``unused`` not),
    the run's script, and a results JSON whose record the run took (snapshot at start, imports at the end)."""
    pkg = tmp_path / "prov_case_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "used.py").write_text(USED)
    (pkg / "unused.py").write_text(UNUSED)
    (tmp_path / "run.py").write_text("print('run')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    snap = provenance.Snapshot(tmp_path, trace=tmp_path / "trace")
    importlib.import_module("prov_case_pkg.used")
    record = snap.record(["run.py"])
    yield tmp_path, record
    for name in ("prov_case_pkg.used", "prov_case_pkg"):
        sys.modules.pop(name, None)


def _stale(root: Path, record: dict, capsys) -> list[str]:
    (root / "docs" / "results").mkdir(parents=True, exist_ok=True)
    data = {"provenance": {"command": "python run.py", "git_commit": "0123456789abcdef", "depends_on": record}}
    (root / "docs" / "results" / "r.json").write_text(json.dumps(data))
    assert render_docs.main(["--stale", "--checkout", str(root)]) == 0
    return capsys.readouterr().out.splitlines()


def test_record_lists_the_imported_modules_and_the_declared_files(run_tree):
    root, record = run_tree
    assert record["form"] == "files" and record["declared"] == ["run.py"]
    assert sorted(record["paths"]) == ["prov_case_pkg/__init__.py", "prov_case_pkg/used.py", "run.py"]
    assert record["paths"]["prov_case_pkg/used.py"] == provenance.source_digest("used.py", USED.encode())


def test_edits_that_are_not_code_or_not_imported_leave_the_result_fresh(run_tree, capsys):
    root, record = run_tree
    (root / "prov_case_pkg" / "unused.py").write_text("import os\n" + UNUSED)  # imports only, never imported
    used = root / "prov_case_pkg" / "used.py"
    used.write_text(USED.replace("Twice ``x``.", "Double of x (a docstring edit).")
                    .replace("help=\"the number \"", "help=\"the integer \""))
    assert provenance.changed_dependencies(record, provenance.tree_files(root)) == []
    assert _stale(root, record, capsys) == ["all 1 results files current"]


def test_a_code_edit_in_an_imported_module_stales_it_and_is_named(run_tree, capsys):
    root, record = run_tree
    (root / "prov_case_pkg" / "used.py").write_text(USED.replace("return 2 * x", "return 2 * x + 0"))
    assert _stale(root, record, capsys) == [
        "docs/results/r.json: measured at commit 0123456789; changed since: prov_case_pkg/used.py",
        "1 of 1 results files stale"]


def test_a_file_edited_during_the_run_is_recorded_as_it_was_at_the_start(tmp_path, monkeypatch):
    pkg = tmp_path / "prov_case_late"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "late.py").write_text("A = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    snap = provenance.Snapshot(tmp_path, trace=tmp_path / "trace")
    (pkg / "late.py").write_text("A = 2\n")  # edited after the start, imported later
    importlib.import_module("prov_case_late.late")
    try:
        rec = snap.record([])
    finally:
        for name in ("prov_case_late.late", "prov_case_late"):
            sys.modules.pop(name, None)
    assert rec["paths"]["prov_case_late/late.py"] == provenance.source_digest("x.py", b"A = 1\n")
    assert provenance.changed_dependencies(rec, provenance.tree_files(tmp_path)) == ["prov_case_late/late.py"]


def test_a_child_process_appends_its_imports_to_the_run(tmp_path):
    snap = provenance.Snapshot(provenance.REPO, trace=tmp_path / "trace")
    env = dict(os.environ, **{provenance.RUN_ENV: str(snap.trace)})
    # importing mmst registers the append at exit; the child imports one module the parent did not need
    subprocess.run([sys.executable, "-c", "import mmst.atomic"], env=env, check=True, cwd=tmp_path)
    child = snap.trace.read_text().split()
    assert "mmst/atomic.py" in child and "mmst/__init__.py" in child
    rec = snap.record(["bench/provenance.py"])
    assert {"mmst/atomic.py", "bench/provenance.py", "mmst/provenance.py"} <= set(rec["paths"])
    snap.close()
    assert not snap.trace.exists()
    subprocess.run([sys.executable, "-c", "import mmst.atomic"], env=env, check=True, cwd=tmp_path)
    assert not snap.trace.exists()  # a run that has ended gets nothing (and no file)


# ------------------------------------------------------------------------------------------ benchmarks
def record_problems(source: str) -> list[str]:
    """Why a benchmark's source does not take its provenance record when the run starts (``[]``: it does).

    The record is ``NAME = run_record(...)`` in ``main``; before it, ``main`` may parse options and leave early
    (an ``if`` ending in ``return``: a worker mode), but not loop, open a ``with``/``try``, or call a function of
    the script (the measurement); the script then passes the record to ``write_results`` or ``finish_record``
    (which add the modules the run imported).
    """
    tree = ast.parse(source)
    local = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} - {"build_parser", "main"}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    records = [c for c in calls if getattr(c.func, "id", None) == "run_record"]
    main = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
    if not records or main is None:
        return ["no run_record call in main"]
    problems = []
    top = [s for s in main.body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Call)
           and getattr(s.value.func, "id", None) == "run_record"]
    if len(top) != len(records):
        problems.append(f"line {records[0].lineno}: run_record is called where the results are built, not assigned "
                        "at the start of main")
    if top:
        for stmt in main.body[: main.body.index(top[0])]:
            if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Return):
                continue  # a mode that returns before the run (a worker)
            if isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)) or any(
                    isinstance(n, ast.Call) and getattr(n.func, "id", None) in local for n in ast.walk(stmt)):
                problems.append(f"line {stmt.lineno}: the run starts before run_record (line {top[0].lineno})")
                break
    if not any(getattr(c.func, "id", None) in ("write_results", "finish_record") for c in calls):
        problems.append("the record is written without write_results/finish_record (no imports recorded)")
    return problems


@pytest.mark.parametrize("path", sorted((REPO / "bench").glob("bench_*.py")), ids=lambda p: p.name)
def test_every_bench_takes_its_record_at_the_start(path):
    assert record_problems(path.read_text()) == []


def test_a_bench_that_records_when_it_writes_fails_the_check():
    at_write = '''
def measure():
    return 1

def main(argv=None):
    args = build_parser().parse_args(argv)
    res = measure()
    write_results(args.out, {"provenance": run_record(depends_on=DEPENDS_ON), "res": res})
'''
    assert record_problems(at_write) == [
        "line 8: run_record is called where the results are built, not assigned at the start of main"]
    late = at_write.replace('    res = measure()\n', '    res = measure()\n    record = run_record(depends_on=DEPENDS_ON)\n')
    late = late.replace('"provenance": run_record(depends_on=DEPENDS_ON)', '"provenance": record')
    assert record_problems(late) == ["line 7: the run starts before run_record (line 8)"]
    early = late.replace('    res = measure()\n    record = run_record(depends_on=DEPENDS_ON)\n',
                         '    record = run_record(depends_on=DEPENDS_ON)\n    res = measure()\n')
    assert record_problems(early) == []
    assert record_problems(early.replace("write_results(args.out, ", "dump(args.out, ")) == [
        "the record is written without write_results/finish_record (no imports recorded)"]


# ------------------------------------------------------------------------------------------ old records
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_an_old_folder_record_converts_to_the_files_its_script_imports(tmp_path, monkeypatch):
    import convert_depends_on

    def git(*a):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path, check=True,
                              capture_output=True, text=True).stdout.strip()

    (tmp_path / "pkg").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "used.py").write_text(USED)
    (tmp_path / "pkg" / "unused.py").write_text(UNUSED)
    (tmp_path / "pkg" / "page.html").write_text("<p>served</p>\n")
    (tmp_path / "bench" / "helper.py").write_text("def f():\n    from pkg.used import scale\n    return scale(1)\n")
    (tmp_path / "bench" / "bench_x.py").write_text("from helper import f\n\nprint(f())\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "one")
    commit = git("rev-parse", "HEAD")
    old = provenance.folder_record(["bench/bench_x.py", "pkg/"], provenance.tree_files(tmp_path))
    monkeypatch.setattr(convert_depends_on, "STATIC_ENTRIES", {"bench/bench_x.py": ("bench/bench_x.py",)})
    (tmp_path / "pkg" / "unused.py").write_text("VALUE = 4\n")  # after the commit: not what was recorded

    rec, what = convert_depends_on.convert(old, commit + "-dirty", "python bench/bench_x.py", tmp_path)
    # used.py is reached through a function-level import in helper.py (not declared: not recorded then either);
    # unused.py is never imported; the page is not Python and stays
    assert sorted(rec["paths"]) == ["bench/bench_x.py", "pkg/__init__.py", "pkg/page.html", "pkg/used.py"]
    assert rec["declared"] == ["bench/bench_x.py"] and what == "4 files (narrowed)"
    assert rec["paths"]["pkg/used.py"] == provenance.source_digest("pkg/used.py", USED.encode())
    assert provenance.changed_dependencies(rec, provenance.tree_files(tmp_path)) == []
    # another script (not known to run only its own imports) keeps every declared file
    rec_all, _ = convert_depends_on.convert(old, commit, "bash recipes/run.sh", tmp_path)
    assert "pkg/unused.py" in rec_all["paths"] and "bench/helper.py" not in rec_all["paths"]
    assert provenance.changed_dependencies(rec_all, provenance.tree_files(tmp_path)) == ["pkg/unused.py"]
    # digests that differ from the commit's files (uncommitted changes in the run) are not converted
    forged = {**old, "paths": {**old["paths"], "pkg/": "0" * 64}}
    assert convert_depends_on.convert(forged, commit, "python bench/bench_x.py", tmp_path) == (
        None, f"the recorded digests differ from the files at {commit[:10]} (uncommitted changes)")
    assert convert_depends_on.convert(old, "f" * 40, "x", tmp_path)[0] is None
    text = json.dumps({"provenance": {"command": "c", "depends_on": old}, "v": 1.5}, indent=1) + "\n"
    assert json.loads(convert_depends_on.rewrite(text, rec)) == {"provenance": {"command": "c", "depends_on": rec},
                                                                 "v": 1.5}


def test_old_folder_records_still_compare_and_say_so(run_tree, capsys):
    root, _ = run_tree
    old = provenance.folder_record(["prov_case_pkg/", "run.py"], provenance.tree_files(root))
    assert _stale(root, old, capsys) == ["all 1 results files current"]
    (root / "prov_case_pkg" / "unused.py").write_text("# a comment changes the bytes\n" + UNUSED)
    assert _stale(root, old, capsys) == [
        "docs/results/r.json: measured at commit 0123456789; changed since: prov_case_pkg/ "
        "(folder digests of the old form)", "1 of 1 results files stale"]
    f = render_docs.Sources(root).freshness("r.json")
    assert render_docs.stale_line(f) == ("**Stale:** measured at commit `0123456789`; the code it measures has changed "
                                         "since (`prov_case_pkg/`; folder digests of the old form).")


def test_a_superseded_result_is_not_stale(run_tree, capsys):
    root, record = run_tree
    (root / "prov_case_pkg" / "used.py").write_text(USED.replace("2 * x", "3 * x"))
    assert _stale(root, record, capsys)[-1] == "1 of 1 results files stale"
    later = root / "docs" / "results" / "r2.json"
    later.write_text(json.dumps({"provenance": {"command": "c", "git_commit": "fedcba9876",
                                                "depends_on": provenance.dependency_record(["run.py"],
                                                                                           provenance.tree_files(root))}}))
    data = json.loads((root / "docs" / "results" / "r.json").read_text())
    (root / "docs" / "results" / "r.json").write_text(json.dumps({"superseded_by": "r2.json", **data}))
    assert render_docs.main(["--stale", "--checkout", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "docs/results/r.json: measured at commit 0123456789; superseded by r2.json",
        "none of 2 results files stale (1 superseded)"]
    f = render_docs.Sources(root).freshness("r.json")
    assert not f.stale and render_docs.stale_line(f).startswith("**Superseded:** by `docs/results/r2.json`")
    (root / "docs" / "results" / "r.json").write_text(json.dumps({"superseded_by": "nope.json", **data}))
    with pytest.raises(render_docs.RenderError, match=r"r\.json: superseded_by 'nope\.json' names no results file"):
        render_docs.Sources(root).freshness("r.json")


def test_a_writer_page_beside_its_json_gets_the_stale_line(run_tree, capsys):
    root, record = run_tree
    _stale(root, record, capsys)  # writes docs/results/r.json
    page = root / "docs" / "results" / "r.md"
    page.write_text("# Results of r\n\n| a |\n|---|\n| 1 |\n")
    (root / "README.md").write_text("# x\n")
    assert render_docs.run(check=False, root=root) == []  # fresh: nothing to add
    (root / "prov_case_pkg" / "used.py").write_text(USED.replace("2 * x", "3 * x"))
    assert render_docs.run(check=True, root=root) == []  # the stale line is information, not a mismatch
    assert render_docs.run(check=False, root=root) == [page]
    assert page.read_text() == ("# Results of r\n\n**Stale:** measured at commit `0123456789`; the code it measures has "
                                "changed since (`prov_case_pkg/used.py`).\n\n| a |\n|---|\n| 1 |\n")
    assert render_docs.run(check=False, root=root) == []  # the line is replaced, not added again
    (root / "prov_case_pkg" / "used.py").write_text(USED)
    assert render_docs.run(check=False, root=root) == [page]
    assert page.read_text() == "# Results of r\n\n| a |\n|---|\n| 1 |\n"


def test_a_stale_result_that_cannot_be_rerun_here_says_why(run_tree, capsys):
    """``"rerun_needs"`` keeps a stale result stale, and ``--stale``, its Stale line and the count say what a rerun
    needs; a current result with it is simply current; an empty reason is an error."""
    root, record = run_tree
    assert _stale(root, record, capsys)[-1] == "all 1 results files current"
    path = root / "docs" / "results" / "r.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({"rerun_needs": "a GPU", **data}))
    assert render_docs.main(["--stale", "--checkout", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == ["all 1 results files current"]
    (root / "prov_case_pkg" / "used.py").write_text(USED.replace("2 * x", "3 * x"))
    assert render_docs.main(["--stale", "--checkout", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "docs/results/r.json: measured at commit 0123456789; changed since: prov_case_pkg/used.py; "
        "not rerun here: needs a GPU",
        "1 of 1 results files stale (1 not rerun here, with the reason)"]
    f = render_docs.Sources(root).freshness("r.json")
    assert f.stale and render_docs.stale_line(f).endswith(
        "(`prov_case_pkg/used.py`). It is not rerun here: a rerun needs a GPU.")
    assert f.describe(why=False) == "changed since: `prov_case_pkg/used.py`"
    path.write_text(json.dumps({"rerun_needs": " ", **data}))
    with pytest.raises(render_docs.RenderError, match=r"r\.json: rerun_needs must be a sentence"):
        render_docs.Sources(root).freshness("r.json")
