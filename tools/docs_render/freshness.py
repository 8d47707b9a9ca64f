"""Freshness of results: which files a result's run used have changed since, the Stale and
Superseded lines, the results index."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmst.provenance import changed_dependencies, is_folder_form, tree_files

from .common import INDEX_BLOCK, MARKER, OPEN, REPO, STALE_LINE, RenderError, md_table
from .registry import TABLES


@dataclass(frozen=True)
class Freshness:
    """Whether the code a results JSON measured has changed since: ``changed`` lists the files (folders, for a
    record of the old form: ``folders``) whose digest differs now (``[]``: current), ``None`` when the JSON
    records no dependencies; ``superseded_by`` names the results file that replaced an archived one;
    ``rerun_needs`` (the JSON's top-level ``"rerun_needs"``) says what a rerun needs that a 2-core CPU machine
    lacks (a GPU, the other machine of a comparison): a stale result with it is listed with that reason."""

    name: str
    commit: str | None
    changed: list[str] | None
    note: str | None = None
    superseded_by: str | None = None
    folders: bool = False
    rerun_needs: str | None = None

    @property
    def stale(self) -> bool:
        """True when the code changed since, or when nobody knows (no dependency record); never for a
        superseded result."""
        return not self.superseded_by and (self.changed is None or bool(self.changed))

    def describe(self, why: bool = True, limit: int | None = None) -> str:
        """``current``, ``changed since: `a`, `b```, ``dependencies unknown`` (with the record's note when
        ``why``) or ``superseded by `x.json```; ``limit`` names at most that many files, then counts the rest."""
        if self.superseded_by:
            return f"superseded by `{self.superseded_by}`"
        needs = f"; not rerun here: needs {self.rerun_needs}" if self.rerun_needs and why else ""
        if self.changed is None:
            return "dependencies unknown" + (f" ({self.note})" if self.note and why else "") + needs
        if not self.changed:
            return "current"
        return ("changed since: " + files_text(self.changed, limit)
                + (" (folder digests of the old form)" if self.folders else "") + needs)


SHOWN_FILES = 6


def files_text(paths: Sequence[str], limit: int | None = None) -> str:
    """```a`, `b``` for ``paths``; with ``limit``, at most that many and ``and N more``."""
    shown = list(paths if limit is None else paths[:limit])
    more = len(paths) - len(shown)
    return ", ".join(f"`{p}`" for p in shown) + (f" and {more} more" if more else "")


class Sources:
    """The results JSON files of one checkout (``ROOT/docs/results``), read once, and the digests of their
    dependency paths in that checkout, taken once per path."""

    def __init__(self, root: Path = REPO):
        self.root = Path(root)
        self.results = self.root / "docs" / "results"
        self._json: dict[str, Any] = {}
        self._digests: dict[str, str] = {}
        self._read = tree_files(self.root)

    def names(self) -> list[str]:
        """Every results JSON file name, sorted."""
        return sorted(p.name for p in self.results.glob("*.json"))

    def load(self, name: str) -> Any:
        """The parsed JSON ``docs/results/NAME``; raises :class:`RenderError` when it cannot be read."""
        if name not in self._json:
            try:
                self._json[name] = json.loads((self.results / name).read_text())
            except (OSError, ValueError) as e:
                raise RenderError(f"docs/results/{name}: cannot read results JSON: {e}") from e
        return self._json[name]

    def freshness(self, name: str) -> Freshness:
        """Compare the JSON's ``provenance.depends_on`` digests with the files under :attr:`root` now."""
        data = self.load(name)
        prov = (data.get("provenance") if isinstance(data, Mapping) else None) or {}
        dep = prov.get("depends_on")
        note = dep.get("note") if isinstance(dep, Mapping) else None
        commit = (prov.get("git_commit") or "").split("-")[0][:10] or None
        later = data.get("superseded_by") if isinstance(data, Mapping) else None
        if later is not None and not (isinstance(later, str) and (self.results / later).is_file()):
            raise RenderError(f"docs/results/{name}: superseded_by {later!r} names no results file in docs/results")
        needs = data.get("rerun_needs") if isinstance(data, Mapping) else None
        if needs is not None and not (isinstance(needs, str) and needs.strip()):
            raise RenderError(f"docs/results/{name}: rerun_needs must be a sentence naming what a rerun needs, "
                              f"got {needs!r}")
        return Freshness(name, commit, changed_dependencies(dep, self._read, self._digests), note, later,
                         isinstance(dep, Mapping) and bool(dep.get("digest")) and is_folder_form(dep), needs)


def stale_line(f: Freshness) -> str:
    """The line under a stale or superseded table (``""`` for a current one)."""
    if f.superseded_by:
        return (f"**Superseded:** by `docs/results/{f.superseded_by}`; this archived run is kept as measured "
                f"and is not rerun.")
    if not f.stale:
        return ""
    at = f"measured at commit `{f.commit}`" if f.commit else "measured at an unrecorded commit"
    needs = f" It is not rerun here: a rerun needs {f.rerun_needs}." if f.rerun_needs else ""
    if f.changed is None:
        return (f"**Stale:** {at}; the code it measures may have changed since (its dependencies are not "
                f"recorded).{needs}")
    old = "; folder digests of the old form" if f.folders else ""
    more = "; `python tools/render_docs.py --stale` lists them all" if len(f.changed) > SHOWN_FILES else ""
    return (f"**Stale:** {at}; the code it measures has changed since ({files_text(f.changed, SHOWN_FILES)}{old}"
            f"{more}).{needs}")


def _script(command: str) -> str:
    """The script a recorded command ran (``bench/bench_x.py``), else the command's start."""
    for tok in command.split():
        tok = tok.rstrip(":;,")
        if tok.endswith((".py", ".sh")):
            return tok
    return command[:40]


def results_index(sources: Sources) -> str:
    """Every results JSON: the documents that render it, its run (script, date, commit) and its freshness."""
    shown: dict[str, set[str]] = {}
    docs = sources.root / "docs"
    for p in doc_files(sources.root):
        text = p.read_text()
        twin = writer_json(p, text, sources)
        if twin:
            shown.setdefault(twin, set()).add(f"[{p.name}]({Path(os.path.relpath(p, docs)).as_posix()})")
        for m in MARKER.finditer(text):
            if m.group(1) == "results" and m.group(2) in TABLES:
                rel = Path(os.path.relpath(p, docs)).as_posix()
                shown.setdefault(TABLES[m.group(2)].json, set()).add(f"[{Path(rel).name}]({rel})")
    rows = []
    for name in sources.names():
        prov = sources.load(name).get("provenance") or {}
        f = sources.freshness(name)
        rows.append([f"`{name}`", ", ".join(sorted(shown.get(name, ()))) or "-", f"`{_script(prov.get('command', '?'))}`",
                     str(prov.get("date", "?"))[:10], f"`{f.commit}`" if f.commit else "-",
                     f.describe(why=False, limit=SHOWN_FILES)])
    return md_table(["results file", "shown in", "written by", "date", "commit", "freshness"], rows)


PAGE_STATUS = re.compile(r"\A((?:# [^\n]*\n\n)?)(?:\*\*(?:Stale|Superseded):\*\* [^\n]*\n\n)?")


def writer_json(page: Path, text: str, sources: Sources) -> str | None:
    """The results JSON whose writer wrote ``page`` beside it (``docs/results/NAME.md`` next to ``NAME.json``,
    without marked blocks: its tables come from that JSON, written in the same run), else ``None``. Such a page
    gets the stale or superseded line of its JSON at its top (:func:`page_status`)."""
    twin = page.with_suffix(".json")
    if page.parent != sources.results or not twin.is_file() or OPEN.search(text):
        return None
    return twin.name


def page_status(text: str, f: Freshness) -> str:
    """``text`` (a writer's page) with the status line of its JSON (:func:`stale_line`) after its title."""
    line = stale_line(f)
    return PAGE_STATUS.sub(lambda m: m[1] + (line + "\n\n" if line else ""), text, count=1)


def _comparable(text: str) -> str:
    """``text`` without what depends on the source tree rather than on the JSON: the stale lines and the
    freshness column of the results index (what ``--check`` ignores)."""
    text = STALE_LINE.sub("", text)
    return INDEX_BLOCK.sub(lambda m: m[1] + re.sub(r"^(\|.*\|)[^|\n]*\|$", r"\1", m[2], flags=re.M) + m[3], text)


def doc_files(root: Path = REPO) -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
