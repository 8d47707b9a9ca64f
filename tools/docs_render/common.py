"""Shared formatting: numbers, Markdown tables, the Source line, paths of the results."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


RESULTS = REPO / "docs" / "results"


MARKER = re.compile(r"<!-- (results|generated):([A-Za-z0-9_.-]+) -->\n(.*?)<!-- /\1:\2 -->", re.S)


OPEN = re.compile(r"<!-- (results|generated):([A-Za-z0-9_.-]+) -->")


STALE_LINE = re.compile(r"^\*\*Stale:\*\* .*\n\n", re.M)


INDEX_BLOCK = re.compile(r"(<!-- generated:results-index -->\n)(.*?)(<!-- /generated:results-index -->)", re.S)


class RenderError(Exception):
    """A marker or a results file that cannot be rendered (message names file and line)."""


def num(x: Any, fmt: str = "{:.2f}") -> str:
    """``fmt`` applied to a number; ``-`` for ``None``/missing, ``inf`` for infinity."""
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    return fmt.format(x)


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def params_m(n: int | None) -> str:
    """Parameter count in millions (``4.33M``)."""
    return "-" if n is None else f"{n / 1e6:.2f}M"


def source_line(name: str, data: Mapping[str, Any]) -> str:
    """One line naming the JSON file and its provenance (command, date, commit, machine)."""
    p = data.get("provenance")
    if not p:
        return f"Source: `docs/results/{name}` (no provenance record)."
    m = p.get("machine") or {}
    mach = ", ".join(x for x in (m.get("cpu_model"), f"{m['cores']} cores" if m.get("cores") else None,
                                 f"torch {m['torch']}" if m.get("torch") else None) if x)
    full = p.get("git_commit") or ""
    commit = full[:10] + ("-dirty" if full.endswith("-dirty") else "")  # uncommitted changes stay visible
    return (f"Source: `docs/results/{name}`, written by `{p.get('command', '?')}` on {str(p.get('date', '?'))[:10]}"
            + (f" at commit `{commit}`" if commit else "") + (f"; machine: {mach}" if mach else "") + ".")


def goal_met(value: float | None, limit: float, strict: bool = False) -> str:
    """``met`` when ``value <= limit`` (``<`` with ``strict``), ``missed`` otherwise, ``-`` when not measured."""
    if value is None:
        return "-"
    return "met" if (value < limit if strict else value <= limit) else "missed"


def pct(x: float | None) -> str:
    """A fraction as a percentage with one decimal (``0.123`` -> ``12.3%``); ``-`` for ``None``."""
    return "-" if x is None else f"{100.0 * x:.1f}%"


def pause_range(ms: str) -> str:
    """``"300,800"`` -> ``300-800``, ``"100,100"`` -> ``100`` (the bench's ``--pause-ms`` as a range)."""
    lo, _, hi = ms.partition(",")
    return lo if not hi or hi == lo else f"{lo}-{hi}"
