"""Where a result came from: the command, the date, the git commit and the machine.

Every results JSON under ``docs/results/`` carries one such record under the key ``"provenance"``, so a
number in the docs can be traced to the run that produced it (development machines differ between
AVX-512/AMX Intel and AVX2 AMD CPUs, and throughput moves by about 2x between them).

Call :func:`run_record` when the run starts (the commit it records is the code that ran).

Usage (bench scripts put ``bench/`` on ``sys.path`` by being run as ``python bench/<script>.py``)::

    from provenance import run_record
    out = {"provenance": run_record(), ...}

or from the shell, to stamp a JSON written by another tool::

    python bench/provenance.py --stamp docs/results/quickstart.json --command "make demo"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from mmst.provenance import cpu_flags, cpu_model, git_commit, machine, run_record

__all__ = ["RESULTS_DIR", "cpu_flags", "cpu_model", "git_commit", "machine", "run_record", "stamp", "write_results"]

REPO = Path(__file__).resolve().parents[1]

#: Directory of the committed results JSON files (rendered into the docs by ``tools/render_docs.py``).
RESULTS_DIR = REPO / "docs" / "results"


def write_results(path: str | os.PathLike[str], obj: dict[str, Any], indent: int = 2,
                  ensure_ascii: bool = True) -> Path:
    """Write a benchmark's results ``obj`` (with its ``provenance`` record) as JSON to ``path``, with a final
    newline, creating the folder; print ``wrote PATH``; return the path. ``indent`` and ``ensure_ascii``
    go to :func:`json.dumps`."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii) + "\n")
    print(f"wrote {out}")
    return out


def stamp(path: str | os.PathLike[str], command: str, date: str | None = None) -> dict[str, Any]:
    """Add a ``provenance`` record to the JSON object in ``path`` (rewritten in place, atomically).

    Use it for JSON that another tool wrote (e.g. ``scores.json`` of ``eval/simultaneous_eval.py``).
    ``date`` overrides the recorded date (ISO 8601) when the run happened earlier than the stamping.
    Raises ``ValueError`` when the file does not hold a JSON object.
    """
    p = Path(path)
    data = json.loads(p.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a JSON object, found {type(data).__name__}")
    rec = run_record(command)
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
    a = ap.parse_args(argv)
    if a.stamp:
        if not a.command:
            ap.error("--stamp needs --command")
        print(json.dumps(stamp(a.stamp, a.command, a.date), indent=1))
    else:
        print(json.dumps(run_record(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
