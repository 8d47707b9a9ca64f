"""Where a result came from: the command, the date, the git commit, the machine and the code it measured.

Every results JSON under ``docs/results/`` carries one such record under the key ``"provenance"``, so a
number in the docs can be traced to the run that produced it (development machines differ between
AVX-512/AMX Intel and AVX2 AMD CPUs, and throughput moves by about 2x between them).

Call :func:`run_record` when the run starts (the commit it records is the code that ran), with the
paths the run uses without importing them (the script itself first; configs, a served page): it snapshots the
repository's files. :func:`write_results` then records the repository modules that the run and its child
processes imported, with their digests at the start (``provenance.depends_on``,
:func:`mmst.provenance.dependency_record`), and ``python tools/render_docs.py --stale`` names the results whose
code has changed since, file by file.

Usage (bench scripts put ``bench/`` on ``sys.path`` by being run as ``python bench/<script>.py``)::

    from provenance import run_record, write_results
    DEPENDS_ON = ("bench/bench_x.py",)
    record = run_record(depends_on=DEPENDS_ON)       # first thing in main()
    ...                                              # the measurement
    write_results(out, {"provenance": record, ...})  # adds what ran

or from the shell, to stamp a JSON written by another tool::

    python bench/provenance.py --stamp docs/results/compare_x.json --command "bash recipes/synthetic/run_compare.sh" \\
        --depends-on recipes/synthetic/run_compare.sh
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mmst.provenance import (
    cpu_flags,
    cpu_model,
    dependency_record,
    finish_record,
    git_commit,
    machine,
    run_record,
)

__all__ = ["RECIPE_DEPENDS_ON", "RESULTS_DIR", "cpu_flags", "cpu_model", "dependency_record", "expand_depends_on",
           "finish_record", "git_commit", "machine", "run_record", "stamp", "write_results"]

REPO = Path(__file__).resolve().parents[1]

#: Directory of the committed results JSON files (rendered into the docs by ``tools/render_docs.py``).
RESULTS_DIR = REPO / "docs" / "results"

_TRAIN_EVAL = ("recipes/synthetic/conf/", "recipes/lib/", "mmst/cli/simultaneous_eval.py", "mmst/cli/compare_systems.py",
               "mmst/features.py", "mmst/data/", "mmst/models/", "mmst/losses.py", "mmst/training/",
               "mmst/simultaneous/", "mmst/evaluation/")
_CORPUS = ("mmst/cli/", "mmst/audio.py", "mmst/corpora/")

#: What each experiment recipe exercises: the recipe, its configs, training and evaluation code, and the corpus
#: code where the recipe generates its corpus. ``stamp(..., depends_on=[recipe])`` (``--depends-on RECIPE``)
#: expands a recipe named here to its list.
RECIPE_DEPENDS_ON: dict[str, tuple[str, ...]] = {
    "recipes/synthetic/run_compare.sh": ("recipes/synthetic/run_compare.sh", *_TRAIN_EVAL),
    "recipes/synthetic/run_waitk_hard.sh": ("recipes/synthetic/run_waitk_hard.sh", *_TRAIN_EVAL, *_CORPUS),
    "recipes/synthetic/run_offline_unified_vs_separate.sh": (
        "recipes/synthetic/run_offline_unified_vs_separate.sh", *_TRAIN_EVAL, *_CORPUS),
}


def expand_depends_on(paths: Sequence[str]) -> list[str]:
    """``paths`` with every recipe of :data:`RECIPE_DEPENDS_ON` replaced by its list (each path once, in order)."""
    out: dict[str, None] = {}
    for p in paths:
        out.update(dict.fromkeys(RECIPE_DEPENDS_ON.get(p, (p,))))
    return list(out)


def write_results(path: str | os.PathLike[str], obj: dict[str, Any], indent: int = 2,
                  ensure_ascii: bool = True) -> Path:
    """Write a benchmark's results ``obj`` (with its ``provenance`` record) as JSON to ``path``, with a final
    newline, creating the folder; print ``wrote PATH``; return the path. ``indent`` and ``ensure_ascii``
    go to :func:`json.dumps`. The record, taken by :func:`run_record` when the run started, first gets the
    modules the run imported (:func:`mmst.provenance.finish_record`)."""
    if isinstance(obj.get("provenance"), dict):
        finish_record(obj["provenance"])
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii) + "\n")
    print(f"wrote {out}")
    return out


def stamp(path: str | os.PathLike[str], command: str, date: str | None = None,
          depends_on: Sequence[str] | None = None) -> dict[str, Any]:
    """Add a ``provenance`` record to the JSON object in ``path`` (rewritten in place, atomically).

    Use it for JSON that another tool wrote (e.g. ``scores.json`` of ``eval/simultaneous_eval.py``).
    ``date`` overrides the recorded date (ISO 8601) when the run happened earlier than the stamping;
    ``depends_on`` lists the source paths the run exercised, a recipe of :data:`RECIPE_DEPENDS_ON` standing for
    its list (stamp right after the run, so that their digests are those of the code that ran; the stamping
    process's own imports are not recorded).
    Raises ``ValueError`` when the file does not hold a JSON object or a dependency path holds no file.
    """
    p = Path(path)
    data = json.loads(p.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a JSON object, found {type(data).__name__}")
    rec = run_record(command, depends_on=expand_depends_on(depends_on) if depends_on else None, imports=False)
    if date:
        rec["date"] = date
    data["provenance"] = rec
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, p)
    return rec


def main(argv: list[str] | None = None) -> int:
    """CLI: print this machine's record, or stamp a JSON file with one."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stamp", metavar="JSON", help="add a provenance record to this JSON file")
    ap.add_argument("--command", help="command line that produced the file (required with --stamp)")
    ap.add_argument("--date", help="ISO date of the run, when it is not now")
    ap.add_argument("--depends-on", metavar="PATHS",
                    help="comma-separated source paths the run exercised (files or folders, from the repository root; "
                         "an experiment recipe stands for everything it runs)")
    a = ap.parse_args(argv)
    if a.stamp:
        if not a.command:
            ap.error("--stamp needs --command")
        deps = [x.strip() for x in a.depends_on.split(",") if x.strip()] if a.depends_on else None
        print(json.dumps(stamp(a.stamp, a.command, a.date, deps), indent=1))
    else:
        print(json.dumps(run_record(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
