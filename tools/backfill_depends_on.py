#!/usr/bin/env python
"""Add ``provenance.depends_on`` to results JSON files written before the record existed, from git history.

For each ``docs/results/*.json`` without the record: the source paths its writer exercises (the writer's
``DEPENDS_ON`` list, read from the writer's source, or a recipe's list in ``bench/provenance.py``), digested as
they were at the JSON's recorded ``git_commit`` (``git ls-tree`` + ``git cat-file``, the same digest as
:func:`mmst.provenance.dependency_record` takes from a checkout). Where the commit is not in this history, the
record has ``null`` digests (dependencies unknown: the docs mark the JSON stale). A commit recorded as
``-dirty`` ran with uncommitted changes: the digests at that commit are kept only when they equal those at the
commit that added the JSON (the changes did not touch the dependencies); otherwise they are unknown.

Only the record is added: the rest of each file stays byte for byte as it was (the record is inserted as text
at the end of the ``provenance`` object, in the file's own indentation). Files that have the record are left
alone, so a rerun changes nothing.

Usage::

    python tools/backfill_depends_on.py [--dry-run] [NAME.json ...]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from provenance import RECIPE_DEPENDS_ON  # noqa: E402

from mmst.provenance import dependency_record, unknown_dependencies  # noqa: E402

RESULTS = REPO / "docs" / "results"

#: The writer of each committed results JSON: a source file with a ``DEPENDS_ON`` list, or a recipe of
#: ``RECIPE_DEPENDS_ON``.
WRITERS: dict[str, str] = {
    "alignment.json": "bench/bench_alignment.py",
    "augment.json": "mmst/evaluation/unseen_gap.py",
    "backbones.json": "mmst/evaluation/backbones.py",
    "augment_cost.json": "bench/bench_train.py",
    "augment_speed_prep.json": "mmst/corpora/speed_perturb.py",
    "compare_hard_600.json": "recipes/synthetic/run_compare.sh",
    "compare_synthetic.json": "recipes/synthetic/run_compare.sh",
    "compare_synthetic_600.json": "recipes/synthetic/run_compare.sh",
    "features.json": "bench/bench_features.py",
    "hard_waitk.json": "recipes/synthetic/run_waitk_hard.sh",
    "longform.json": "bench/bench_longform.py",
    "offline_xs_10min.json": "recipes/synthetic/run_offline_unified_vs_separate.sh",
    "policies_hard.json": "mmst/evaluation/policy_compare.py",
    "quickstart.json": "tools/collect_quickstart.py",
    "serve.json": "bench/bench_serve.py",
    "stragglers.json": "bench/bench_stragglers.py",
    "stragglers_mmst.json": "bench/bench_stragglers_mmst.py",
    "streaming.json": "bench/bench_streaming.py",
    "streaming_policies.json": "bench/bench_streaming.py",
    "train.json": "bench/bench_train.py",
    "train_quick.json": "bench/bench_train_quick.py",
    "vs_fairseq.json": "bench/bench_vs_fairseq.py",
    "vs_fairseq_2threads.json": "bench/bench_vs_fairseq.py",
}


def writer_depends_on(writer: str) -> list[str]:
    """The ``DEPENDS_ON`` tuple assigned at the top level of ``writer`` (read with :mod:`ast`, not imported),
    or the recipe's list. Raises ``ValueError`` when the writer has none."""
    if writer in RECIPE_DEPENDS_ON:
        return list(RECIPE_DEPENDS_ON[writer])
    tree = ast.parse((REPO / writer).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DEPENDS_ON" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise ValueError(f"{writer}: no top-level DEPENDS_ON")


def _git(*args: str, repo: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


class GitTree:
    """A :data:`~mmst.provenance.FileReader` over the files of one commit of ``repo`` (``git ls-tree``, then
    one ``git cat-file --batch`` for the contents)."""

    def __init__(self, commit: str, repo: Path = REPO):
        self.commit, self.repo = commit, repo
        self._cat = subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)

    def __call__(self, path: str) -> list[tuple[str, bytes]]:
        out = []
        for entry in _git("ls-tree", "-r", "-z", self.commit, "--", path.rstrip("/"), repo=self.repo).split("\0"):
            if not entry:
                continue
            meta, rel = entry.split("\t", 1)
            mode, kind, sha = meta.split()
            if kind != "blob" or mode == "120000":
                continue
            assert self._cat.stdin is not None and self._cat.stdout is not None
            self._cat.stdin.write(sha.encode() + b"\n")
            self._cat.stdin.flush()
            size = int(self._cat.stdout.readline().split()[2])
            data = self._cat.stdout.read(size)
            self._cat.stdout.read(1)  # the newline after the contents
            out.append((rel, data))
        return out

    def close(self) -> None:
        """End the ``git cat-file`` process."""
        if self._cat.stdin:
            self._cat.stdin.close()
        self._cat.wait()


def _has_commit(commit: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO,
                          capture_output=True).returncode == 0


def _at(commit: str, paths: Sequence[str]) -> dict[str, Any]:
    reader = GitTree(commit)
    try:
        return dependency_record(paths, reader, strict=False)
    finally:
        reader.close()


def record_for(name: str, recorded: str | None, paths: Sequence[str]) -> dict[str, Any]:
    """The ``depends_on`` record of results file ``name`` measured at commit ``recorded``."""
    commit = (recorded or "").removesuffix("-dirty")
    if not commit or not _has_commit(commit):
        return unknown_dependencies(paths, f"commit {commit or '(none)'} is not in the history; backfilled")
    rec = _at(commit, paths)
    if recorded and recorded.endswith("-dirty"):
        landed = _git("log", "-1", "--format=%H", "--", f"docs/results/{name}").strip()
        if not landed or _at(landed, paths) != rec:
            return unknown_dependencies(paths, f"backfilled: the run had uncommitted changes on top of {commit[:10]}, "
                                               f"and the dependencies differ between {commit[:10]} and "
                                               f"{landed[:10] or '?'}, the commit that added this file")
        rec["note"] = (f"backfilled from git: run on {commit[:10]} with uncommitted changes; the dependencies are "
                       f"the same at {landed[:10]}, which committed this file")
    else:
        rec["note"] = f"backfilled from git at {commit[:10]}"
    return rec


def _object_end(text: str, start: int) -> int:
    """Index of the ``}`` closing the JSON object that opens at ``text[start] == '{'``."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError("unbalanced JSON object")


def insert_record(text: str, record: dict[str, Any]) -> str:
    """``text`` (a JSON object with a top-level ``"provenance"`` object) with ``"depends_on": record`` added
    as the last member of that object, formatted in the file's indentation; nothing else changes."""
    data = json.loads(text)
    top = text.index("{")
    # the top-level "provenance" key: the first occurrence at depth 1
    depth, i, key_at = 0, top, -1
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if depth == 1 and text[i:j + 1] == '"provenance"' and text[j + 1:].lstrip().startswith(":"):
                key_at = j + 1
                break
            i = j
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        i += 1
    if key_at < 0:
        raise ValueError("no top-level provenance object")
    open_at = text.index("{", key_at)
    close_at = _object_end(text, open_at)
    last = len(text[:close_at].rstrip())  # just after the last member's value
    inner = text[open_at + 1:]
    member_indent = inner[:len(inner) - len(inner.lstrip())].split("\n")[-1] if inner.lstrip() != inner else ""
    ascii_only = text.isascii()
    if "\n" in text[open_at:close_at]:
        close_indent = text[:close_at].split("\n")[-1]
        unit = max(1, len(member_indent) - len(close_indent))
        body = json.dumps(record, indent=unit, ensure_ascii=ascii_only).replace("\n", "\n" + member_indent)
        new = text[:last] + ",\n" + member_indent + '"depends_on": ' + body + text[last:]
    else:
        new = text[:last] + ', "depends_on": ' + json.dumps(record, ensure_ascii=ascii_only) + text[last:]
    want = dict(data)
    want["provenance"] = {**data["provenance"], "depends_on": record}
    if json.loads(new) != want:
        raise ValueError("inserting the record changed the JSON")
    return new


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="results files (default: every docs/results/*.json)")
    ap.add_argument("--dry-run", action="store_true", help="print the records, write nothing")
    return ap


def main(argv: list[str] | None = None) -> int:
    """CLI: backfill every results JSON (or the named ones) that lacks the record."""
    a = build_parser().parse_args(argv)
    for name in a.names or sorted(p.name for p in RESULTS.glob("*.json")):
        path = RESULTS / name
        text = path.read_text()
        prov = json.loads(text).get("provenance") or {}
        if "depends_on" in prov:
            print(f"{name}: has depends_on")
            continue
        if name not in WRITERS:
            raise SystemExit(f"error: {name}: no writer known; add it to WRITERS")
        try:
            rec = record_for(name, prov.get("git_commit"), writer_depends_on(WRITERS[name]))
        except (ValueError, subprocess.CalledProcessError) as e:
            raise SystemExit(f"error: {name}: {e}") from None
        print(f"{name}: {rec['note']}")
        if not a.dry_run:
            path.write_text(insert_record(text, rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
