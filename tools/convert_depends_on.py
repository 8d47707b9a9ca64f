#!/usr/bin/env python
"""Convert the old ``provenance.depends_on`` records (one digest per declared folder) to per-file records, from
git history, so that ``tools/render_docs.py --stale`` names the files that changed without rerunning the runs.

A record of the old form holds, per declared path, the digest of the bytes of its files when the run was
recorded, at the JSON's ``git_commit`` C. The conversion reads the declared paths at C from git (``git ls-tree``
and ``git cat-file``, :class:`backfill_depends_on.GitTree`) and first checks that their folder digests equal the
recorded ones: then C's files are the files that were recorded, even for a run at a ``-dirty`` commit, and their
per-file digests (:func:`mmst.provenance.source_digest`: syntax trees for ``.py``) replace the folder digests.
A record that does not verify, or whose commit is not in this history, stays as it is (the renderer compares
it folder by folder).

For the benchmarks whose processes only run benchmark scripts (:data:`STATIC_ENTRIES`: the script, its worker
modes, ``bench/bench_train.py``, forked or spawned functions of the script), the declared ``.py`` files are
narrowed to those that the scripts' static import closure at C reaches: every ``import`` statement, those inside
functions included, followed through the repository (no module of the repository imports by computed name).
Files that are not Python (configs, pages) stay. Benchmarks that start other programs (the server, torchrun
ranks of ``mmst-train``, recipes) keep every declared file.

Each converted record gets a ``note`` naming the commit and the rule. The JSON is rewritten with the
indentation it was written with (the tool checks that the rewrite changes nothing but the record).

Usage::

    python tools/convert_depends_on.py [--dry-run] [NAME.json ...]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tools")]

from backfill_depends_on import GitTree  # noqa: E402
from backfill_depends_on import build_parser as backfill_parser  # noqa: E402

from mmst.provenance import FILES_FORM, dependency_record, folder_record, is_folder_form  # noqa: E402

RESULTS = REPO / "docs" / "results"

#: Benchmark scripts whose runs execute nothing but Python reached from these entry scripts (the script's
#: worker modes and multiprocessing children, and the scripts named here): their records may be narrowed to
#: the static import closure.
STATIC_ENTRIES: dict[str, tuple[str, ...]] = {
    "bench/bench_alignment.py": ("bench/bench_alignment.py",),
    "bench/bench_features.py": ("bench/bench_features.py",),
    "bench/bench_int8.py": ("bench/bench_int8.py",),
    "bench/bench_longform.py": ("bench/bench_longform.py",),
    "bench/bench_streaming.py": ("bench/bench_streaming.py",),
    "bench/bench_stragglers.py": ("bench/bench_stragglers.py",),
    "bench/bench_train.py": ("bench/bench_train.py",),
    "bench/bench_train_quick.py": ("bench/bench_train_quick.py",),
    "bench/bench_threads.py": ("bench/bench_threads.py", "bench/bench_train.py"),
    "bench/bench_vs_fairseq.py": ("bench/bench_vs_fairseq.py", "bench/bench_train.py"),
}


def _script(command: str) -> str | None:
    """The repository script a recorded command ran (the first ``.py``/``.sh`` token)."""
    for tok in command.split():
        if tok.endswith((".py", ".sh")):
            return tok
    return None


def _imported_names(tree: ast.AST, package: str) -> Iterable[str]:
    """Every module name that the statements of ``tree`` import (with their parent packages), relative imports
    resolved against ``package``; ``from M import x`` also yields ``M.x`` (``x`` may be a submodule)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            parts = name.split(".")
            yield from (".".join(parts[: i + 1]) for i in range(len(parts)) if parts[0])


def import_closure(entries: Iterable[str], read: Callable[[str], bytes | None]) -> set[str]:
    """The repository files that ``entries`` (scripts, relative paths) reach through import statements.

    A top-level module name is looked up beside the entry scripts (``bench/`` for ``from provenance import``)
    and at the repository root (``mmst``); ``read(path)`` gives a file's bytes or ``None`` when it does not
    exist. Names that match no file (the standard library, third-party packages) are left out.
    """
    entries = list(entries)
    dirs = sorted({str(Path(e).parent.as_posix()) for e in entries} | {"."})
    seen: set[str] = set()
    todo: list[tuple[str, str]] = [(e, "") for e in entries]  # (file, its package)
    cache: dict[str, str | None] = {}

    def find(name: str) -> tuple[str, str] | None:
        if name in cache:
            f = cache[name]
            return (f, name if f and f.endswith("__init__.py") else name.rpartition(".")[0]) if f else None
        rel = name.replace(".", "/")
        for d in dirs:
            for cand in (f"{rel}/__init__.py", f"{rel}.py"):
                path = cand if d == "." else f"{d}/{cand}"
                if read(path) is not None:
                    cache[name] = path
                    return path, name if cand.endswith("__init__.py") else name.rpartition(".")[0]
        cache[name] = None
        return None

    while todo:
        path, package = todo.pop()
        if path in seen:
            continue
        data = read(path)
        if data is None:
            continue
        seen.add(path)
        for name in _imported_names(ast.parse(data), package):
            hit = find(name)
            if hit and hit[0] not in seen:
                todo.append(hit)
    return seen


def convert(record: Mapping[str, Any], commit: str, command: str, repo: Path = REPO) -> tuple[dict[str, Any] | None, str]:
    """The per-file record of an old-form ``record`` measured at ``commit`` (``-dirty`` allowed), and a line
    saying what was done; ``(None, why)`` when it cannot be converted soundly."""
    if not is_folder_form(record):
        return None, "already per file"
    if not record.get("digest"):
        return None, "dependencies unknown: nothing to convert"
    base = commit.removesuffix("-dirty")
    if not base or subprocess.run(["git", "cat-file", "-e", f"{base}^{{commit}}"], cwd=repo,
                                  capture_output=True).returncode:
        return None, f"commit {base or '(none)'} is not in this history"
    declared = list(record["paths"])
    reader = GitTree(base, repo)
    try:
        if folder_record(declared, reader, strict=False) != {"digest": record["digest"], "paths": dict(record["paths"])}:
            return None, f"the recorded digests differ from the files at {base[:10]} (uncommitted changes)"
        under = {path: [rel for rel, _ in reader(path)] for path in declared}
        files = {rel: data for path in declared for rel, data in reader(path)}
        script = _script(command)
        narrowed = ""
        if script in STATIC_ENTRIES:
            def read_at(path: str) -> bytes | None:
                hit = [d for r, d in reader(path) if r == path]
                return hit[0] if hit else None

            reach = import_closure(STATIC_ENTRIES[script], read_at)
            files = {rel: d for rel, d in files.items() if not rel.endswith(".py") or rel in reach}
            narrowed = (f"; .py files narrowed to the static import closure of "
                        f"{', '.join(STATIC_ENTRIES[script])} at {base[:10]}")
        rec = dependency_record([], lambda p: [(p, files[p])] if p in files else [], imported=sorted(files))
    finally:
        reader.close()
    rec["declared"] = [path for path in declared if all(rel in files for rel in under[path])]  # every file kept
    rec["note"] = (f"converted from the folder digests of {', '.join(declared)} recorded at {base[:10]} (verified "
                   f"against git); per-file digests of their files at that commit" + narrowed)
    assert rec["form"] == FILES_FORM
    return rec, f"{len(files)} files" + (" (narrowed)" if narrowed else "")


def rewrite(text: str, record: Mapping[str, Any]) -> str:
    """``text`` (a results JSON written by :func:`json.dumps`) with ``provenance.depends_on`` replaced by
    ``record``, in the indentation the file was written with. Raises ``ValueError`` when the file's text is
    not what :func:`json.dumps` writes for its data (the rewrite would change more than the record)."""
    data = json.loads(text)
    for indent in (1, 2, None):
        for ensure_ascii in (False, True):
            for end in ("\n", ""):
                if json.dumps(data, indent=indent, ensure_ascii=ensure_ascii) + end == text:
                    data["provenance"]["depends_on"] = dict(record)
                    return json.dumps(data, indent=indent, ensure_ascii=ensure_ascii) + end
    raise ValueError("the file is not in json.dumps's layout; convert it by hand")


def build_parser() -> argparse.ArgumentParser:
    """Command-line options (those of ``tools/backfill_depends_on.py``: file names, ``--dry-run``)."""
    ap = backfill_parser()
    ap.description = __doc__.split("\n")[0]
    return ap


def main(argv: list[str] | None = None) -> int:
    """CLI: convert every old-form record (or the named files') that verifies against git history."""
    a = build_parser().parse_args(argv)
    for path in [RESULTS / n for n in a.names] or sorted(RESULTS.glob("*.json")):
        name, text = path.name, path.read_text()
        prov = json.loads(text).get("provenance") or {}
        rec, what = convert(prov.get("depends_on") or {}, prov.get("git_commit") or "", prov.get("command") or "")
        print(f"{name}: {'converted, ' if rec else 'kept: '}{what}")
        if rec and not a.dry_run:
            try:
                path.write_text(rewrite(text, rec))
            except ValueError as e:
                raise SystemExit(f"error: {name}: {e}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
