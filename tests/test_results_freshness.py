"""Results that say when they went stale: the ``provenance.depends_on`` digests (mmst.provenance), the check
``tools/render_docs.py --stale``, the rendered stale line and results index, and the backfill of old JSON.

Everything that changes files works on a small copy of the needed files in ``tmp_path``, never on the repository.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "bench"))

import backfill_depends_on  # noqa: E402
import provenance as bench_provenance  # noqa: E402
import render_docs  # noqa: E402

from mmst import provenance  # noqa: E402

RESULTS = REPO / "docs" / "results"
FEATURES_DEPS = ["bench/bench_features.py", "mmst/audio.py", "mmst/features.py"]


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# ------------------------------------------------------------------------------------------------ digests
def test_files_digest_is_sha256_of_the_sorted_sha256sum_listing():
    files = [("b/x.txt", b"x"), ("a.py", b"")]
    listing = f"{_sha(b'')}  a.py\n{_sha(b'x')}  b/x.txt\n"  # what `sort | xargs sha256sum` prints
    assert provenance.files_digest(files) == _sha(listing.encode())
    assert provenance.files_digest(files[::-1]) == _sha(listing.encode())
    assert provenance.files_digest([("b/y.txt", b"x"), ("a.py", b"")]) != _sha(listing.encode())  # renamed
    assert provenance.files_digest([]) == _sha(b"")


def test_folder_record_of_the_old_form_per_path_and_total(tmp_path):
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "m.py").write_bytes(b"A = 1\n")
    (tmp_path / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0junk")
    (tmp_path / "run.py").write_bytes(b"print(1)\n")
    rec = provenance.folder_record(["pkg/", "run.py"], provenance.tree_files(tmp_path))
    m, run = _sha(b"A = 1\n"), _sha(b"print(1)\n")
    assert rec["paths"] == {"pkg/": _sha(f"{m}  pkg/m.py\n".encode()), "run.py": _sha(f"{run}  run.py\n".encode())}
    assert rec["digest"] == provenance.files_digest([("pkg/m.py", b"A = 1\n"), ("run.py", b"print(1)\n")])
    read = provenance.tree_files(tmp_path)
    assert provenance.changed_dependencies(rec, read) == []
    (tmp_path / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"other byte code")
    assert provenance.changed_dependencies(rec, read) == []  # byte code is not source
    (tmp_path / "pkg" / "new.py").write_bytes(b"")
    assert provenance.changed_dependencies(rec, read) == ["pkg/"]
    (tmp_path / "run.py").unlink()
    assert provenance.changed_dependencies(rec, read) == ["pkg/", "run.py"]
    assert provenance.changed_dependencies(None) is None
    assert provenance.changed_dependencies(provenance.unknown_dependencies(["pkg/"], "why")) is None
    with pytest.raises(ValueError, match="'nope/' holds no file"):
        provenance.folder_record(["nope/"], read)
    with pytest.raises(ValueError, match="no paths"):
        provenance.folder_record([], read)


def test_dependency_record_one_digest_per_file(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "a.yaml").write_bytes(b"lr: 1\n")
    (tmp_path / "run.py").write_bytes(b"print(1)\n")
    read = provenance.tree_files(tmp_path)
    rec = provenance.dependency_record(["conf/", "run.py"], read)
    yaml_d, run_d = _sha(b"lr: 1\n"), provenance.source_digest("run.py", b"print(1)\n")
    assert rec == {"form": "files", "paths": {"conf/a.yaml": yaml_d, "run.py": run_d}, "declared": ["conf/", "run.py"],
                   "digest": _sha(f"{yaml_d}  conf/a.yaml\n{run_d}  run.py\n".encode())}
    assert provenance.changed_dependencies(rec, read) == []
    (tmp_path / "conf" / "b.yaml").write_bytes(b"lr: 2\n")  # a config added to a declared folder
    (tmp_path / "run.py").write_bytes(b"print(2)\n")
    assert provenance.changed_dependencies(rec, read) == ["run.py", "conf/b.yaml"]
    (tmp_path / "conf" / "a.yaml").unlink()
    assert provenance.changed_dependencies(rec, read) == ["conf/a.yaml", "run.py", "conf/b.yaml"]
    with pytest.raises(ValueError, match="'nope/' holds no file"):
        provenance.dependency_record(["nope/"], read)
    with pytest.raises(ValueError, match="no paths"):
        provenance.dependency_record([], read)


def test_run_record_outside_a_checkout_marks_dependencies_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "REPO", tmp_path)  # no pyproject.toml: an installed package
    rec = provenance.run_record("x", depends_on=["mmst/models/"])["depends_on"]
    assert rec["digest"] is None and rec["paths"] == {"mmst/models/": None} and "source checkout" in rec["note"]


def test_stamp_records_a_recipe_s_dependencies(tmp_path):
    p = tmp_path / "comparison.json"
    p.write_text(json.dumps({"BLEU": 1.0}))
    bench_provenance.stamp(p, "bash recipes/synthetic/run_compare.sh", depends_on=["recipes/synthetic/run_compare.sh"])
    dep = json.loads(p.read_text())["provenance"]["depends_on"]
    want = bench_provenance.RECIPE_DEPENDS_ON["recipes/synthetic/run_compare.sh"]
    assert dep["declared"] == list(want) and "mmst/models/" in want
    enc = (REPO / "mmst" / "models" / "encoder.py").read_bytes()
    assert dep["paths"]["mmst/models/encoder.py"] == provenance.source_digest("mmst/models/encoder.py", enc)
    assert dep["digest"] == provenance.listing_digest(dep["paths"])
    # declared paths only: the stamping process's own modules are not recorded
    assert "bench/provenance.py" not in dep["paths"] and "mmst/provenance.py" not in dep["paths"]


def _writer_lists() -> dict[str, list[str]]:
    """Every writer's DEPENDS_ON (bench scripts, evaluation writers, the quickstart collector, recipes)."""
    out = {w: backfill_depends_on.writer_depends_on(w) for w in set(backfill_depends_on.WRITERS.values())}
    for p in sorted((REPO / "bench").glob("bench_*.py")):
        out[f"bench/{p.name}"] = backfill_depends_on.writer_depends_on(f"bench/{p.name}")
    return out


def test_every_writer_lists_existing_paths_and_itself():
    lists = _writer_lists()
    assert len(lists) >= 16
    for writer, paths in lists.items():
        assert paths, writer
        for path in paths:
            assert (REPO / path).exists(), f"{writer}: DEPENDS_ON names {path}, which does not exist"
        if writer.startswith("bench/"):
            assert paths[0] == writer
    # every bench script that records provenance passes its list
    for p in sorted((REPO / "bench").glob("bench_*.py")):
        src = p.read_text()
        calls = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", None) == "run_record"]
        assert calls and all(any(k.arg == "depends_on" for k in c.keywords) for c in calls), p.name


# ------------------------------------------------------------------------------------------------ the committed JSON
@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_results_json_records_what_it_measured(path):
    rec = json.loads(path.read_text())["provenance"].get("depends_on")
    assert rec, f"{path.name}: no provenance.depends_on (bench/provenance.py run_record(depends_on=...))"
    assert rec["paths"] and all(isinstance(p, str) and p for p in rec["paths"])
    if rec["digest"] is None:  # dependencies unknown: must say why
        assert rec.get("note") and all(v is None for v in rec["paths"].values())
    else:
        assert all(len(v) == 64 for v in [rec["digest"], *rec["paths"].values()])


def test_index_lists_every_results_file():
    index = (REPO / "docs" / "index.md").read_text()
    block = render_docs.INDEX_BLOCK.search(index)
    assert block, "docs/index.md has no generated:results-index block"
    for p in RESULTS.glob("*.json"):
        assert f"| `{p.name}` |" in block[2], p.name


# ------------------------------------------------------------------------------------------------ a copy of the tree
@pytest.fixture
def tree(tmp_path):
    """``tmp_path`` holding features.json (measured in this copy: fresh digests), the files it depends on, and
    a document with its table and the results index."""
    for rel in FEATURES_DEPS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    data = json.loads((RESULTS / "features.json").read_text())
    data["provenance"]["git_commit"] = "0123456789abcdef"
    data["provenance"]["depends_on"] = provenance.dependency_record(FEATURES_DEPS, provenance.tree_files(tmp_path))
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "features.json").write_text(json.dumps(data, indent=2))
    (tmp_path / "README.md").write_text("# x\n")
    (tmp_path / "docs" / "perf.md").write_text(
        "# perf\n\n<!-- results:features -->\n<!-- /results:features -->\n\n"
        "<!-- generated:results-index -->\n<!-- /generated:results-index -->\n")
    return tmp_path


STALE = ("**Stale:** measured at commit `0123456789`; the code it measures has changed since "
         "(`mmst/features.py`).")


def _stale_cli(root: Path, capsys) -> list[str]:
    assert render_docs.main(["--stale", "--checkout", str(root)]) == 0
    return capsys.readouterr().out.splitlines()


def test_unchanged_tree_lists_nothing_and_renders_no_stale_line(tree, capsys):
    assert [f.stale for f in render_docs.stale_results(tree)] == [False]
    assert _stale_cli(tree, capsys) == ["all 1 results files current"]
    doc = tree / "docs" / "perf.md"
    assert render_docs.run(check=False, root=tree) == [doc]
    text = doc.read_text()
    assert "| fbank | 1 |" in text and "**Stale:**" not in text
    assert "| `features.json` | [perf.md](perf.md) | `bench/bench_features.py` |" in text and text.count("| current |") == 1
    assert render_docs.run(check=True, root=tree) == []
    assert render_docs.run(check=False, root=tree) == []  # render and check agree


def test_changed_dependency_is_listed_and_the_docs_say_so(tree, capsys):
    doc = tree / "docs" / "perf.md"
    render_docs.run(check=False, root=tree)
    fresh = doc.read_text()
    feats = tree / "mmst" / "features.py"
    original = feats.read_bytes()
    feats.write_bytes(original + b"\nONE_MORE_LINE = 1\n")

    assert _stale_cli(tree, capsys) == [
        "docs/results/features.json: measured at commit 0123456789; changed since: mmst/features.py",
        "1 of 1 results files stale"]
    # stale is information: --check still passes with the old text (tables equal their JSON) ...
    assert render_docs.run(check=True, root=tree) == []
    assert render_docs.main(["--check", "--checkout", str(tree)]) == 0
    # ... and a render writes the line under the table and the freshness into the index
    assert render_docs.run(check=False, root=tree) == [doc]
    stale = doc.read_text()
    assert stale.count(STALE) == 1
    block = stale.split("<!-- results:features -->")[1].split("<!-- /results:features -->")[0]
    assert block.rstrip("\n").endswith(STALE)
    assert "| `0123456789` | changed since: `mmst/features.py` |" in stale
    assert render_docs.run(check=True, root=tree) == []
    # a number edited by hand is still caught with the stale line present
    assert render_docs.run(check=False, root=tree) == []
    row = next(line for line in stale.splitlines() if line.startswith("| fbank | 1 |"))
    cells = row.split(" | ")
    cells[2] = str(int(cells[2]) + 1)
    doc.write_text(stale.replace(row, " | ".join(cells)))
    assert render_docs.run(check=True, root=tree) == [doc]
    # the code back as it was: current again, the line goes away on the next render
    feats.write_bytes(original)
    assert _stale_cli(tree, capsys)[-1] == "all 1 results files current"
    render_docs.run(check=False, root=tree)
    assert doc.read_text() == fresh


def test_json_without_dependencies_is_unknown(tree, capsys):
    p = tree / "docs" / "results" / "features.json"
    data = json.loads(p.read_text())
    del data["provenance"]["depends_on"]
    p.write_text(json.dumps(data))
    assert _stale_cli(tree, capsys) == [
        "docs/results/features.json: measured at commit 0123456789; dependencies unknown", "1 of 1 results files stale"]
    render_docs.run(check=False, root=tree)
    text = (tree / "docs" / "perf.md").read_text()
    assert ("**Stale:** measured at commit `0123456789`; the code it measures may have changed since "
            "(its dependencies are not recorded).") in text
    assert "| dependencies unknown |" in text


# ------------------------------------------------------------------------------------------------ backfill
def test_backfill_inserts_the_record_and_keeps_every_other_byte():
    text = ('{\n "summary": {"x": 1e-05, "y": 0.10000000000000001, "s": "\u00e9 \\"}{"},\n'
            ' "provenance": {\n  "command": "python a.py",\n  "machine": {\n   "cores": 2\n  }\n },\n'
            ' "rows": [1, 2]\n}\n')
    rec = {"digest": "d", "paths": {"a.py": "d"}, "note": "n"}
    new = backfill_depends_on.insert_record(text, rec)
    assert new == text.replace('   "cores": 2\n  }\n },', '   "cores": 2\n  },\n  "depends_on": {\n   "digest": "d",\n'
                               '   "paths": {\n    "a.py": "d"\n   },\n   "note": "n"\n  }\n },')
    assert json.loads(new)["provenance"]["depends_on"] == rec
    one_line = '{"provenance": {"command": "c"}, "v": 1.50}'
    assert backfill_depends_on.insert_record(one_line, {"digest": None}) == (
        '{"provenance": {"command": "c", "depends_on": {"digest": null}}, "v": 1.50}')
    with pytest.raises(ValueError, match="no top-level provenance"):
        backfill_depends_on.insert_record('{"x": {"provenance": {}}}', rec)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_digest_from_git_history_equals_the_checkout(tmp_path):
    def git(*a):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_bytes(b"A = 1\n")
    (tmp_path / "pkg" / "sub" / "b.bin").write_bytes(bytes(range(256)))
    (tmp_path / "pkg_other.py").write_bytes(b"not under pkg/\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "one")
    paths = ["pkg/", "pkg_other.py"]
    reader = backfill_depends_on.GitTree("HEAD", repo=tmp_path)
    try:
        at_commit = provenance.dependency_record(paths, reader)
    finally:
        reader.close()
    assert at_commit == provenance.dependency_record(paths, provenance.tree_files(tmp_path))
