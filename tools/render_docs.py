#!/usr/bin/env python
"""Render every results table in README.md and docs/ from the committed JSON files in docs/results/.

A table lives between two markers in a Markdown file::

    <!-- results:NAME -->
    (generated text: the table and a line naming its JSON, command, date and machine)
    <!-- /results:NAME -->

``NAME`` is a key of :data:`TABLES`, which names the JSON file under ``docs/results/`` and the function
that turns it into Markdown. The marker ``<!-- generated:config-keys -->`` ... ``<!-- /generated:config-keys
-->`` holds the ``mmst-train`` config key reference, generated from the field documentation of
:mod:`mmst.training.config` (the same text as ``mmst-train --help``); ``generated:results-index`` (in
``docs/index.md``) lists every results JSON with its run and its freshness. A page that a writer wrote beside
its JSON (``NAME.md`` next to ``NAME.json`` in docs/results, without markers) keeps that JSON's stale or
superseded line at its top.

Freshness: each JSON's ``provenance.depends_on`` holds a digest of every file its run used: the modules it
imported and the paths its writer declared (:mod:`mmst.provenance`; records of the old form hold one digest per
declared folder). When a digest no longer matches the tree, the JSON is *stale*: the code it measures has
changed since, and the files that changed are named. A stale table gets one rendered line under it
(``**Stale:** measured at commit X; the code it measures has changed since (`file`, ...)``); a JSON without the
record counts as stale too (dependencies unknown). A JSON with a top-level ``"superseded_by": "NAME.json"`` is an
archived run that a later one replaced: it shows as superseded, never as stale. A top-level ``"rerun_needs":
"..."`` says what a rerun needs that a 2-core CPU machine lacks; a stale result with it stays stale, and
``--stale`` and its Stale line give that reason. Staleness is information, not an
error: ``--check`` compares the tables with their JSON and ignores the stale lines and the index's freshness
column; a fresh render writes them.

Usage::

    python tools/render_docs.py            # rewrite every marked block in README.md and docs/**/*.md
    python tools/render_docs.py --check    # exit 1 (and list them) when a block differs from its source
    python tools/render_docs.py --stale    # list the results JSON whose code has changed since (exit 0)
    python tools/render_docs.py --stale --checkout DIR   # the same for another checkout or an unpacked tarball
    python tools/render_docs.py --list     # the table names and their JSON files

Errors (exit 2): an unknown NAME, a marker without its closing marker, a missing or unreadable JSON.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/: the docs_render package beside this script
from docs_render import (
    common,
    comparisons,
    development,
    distributed,
    freshness,
    longform,
    models,
    performance,
    quickstart,
    registry,
    serving,
)
from docs_render.common import MARKER, OPEN, REPO, RenderError, source_line
from docs_render.freshness import (
    Freshness,
    Sources,
    _comparable,
    doc_files,
    page_status,
    results_index,
    stale_line,
    writer_json,
)
from docs_render.registry import GENERATED, TABLES

from mmst.cli_help import ArgumentParser

_PACKAGE = (common, quickstart, development, comparisons, distributed, performance, models, longform, serving, registry, freshness)


def __getattr__(name: str) -> Any:
    """The formatters, the registry and the freshness check live in ``tools/docs_render/`` (one module per page or
    results family); their names stay reachable from this module (``render_docs.quickstart_total``)."""
    for module in _PACKAGE:
        if name in vars(module):
            return vars(module)[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def render_block(kind: str, name: str, sources: Sources) -> str:
    """The text between the markers of block ``kind:name`` (starts and ends with a newline)."""
    if kind == "generated":
        if name == "results-index":
            return "\n" + results_index(sources) + "\n\n"
        if name not in GENERATED:
            raise RenderError(f"unknown generated block {name!r} (known: {', '.join([*GENERATED, 'results-index'])})")
        return "\n" + GENERATED[name]() + "\n\n"
    if name not in TABLES:
        raise RenderError(f"unknown results table {name!r} (known: {', '.join(TABLES)})")
    t = TABLES[name]
    data = sources.load(t.json)
    part = data
    for k in (t.subkey.split("/") if t.subkey else []):
        part = part[k]
    try:
        body = t.render(part)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise RenderError(f"docs/results/{t.json}: cannot render table {name!r}: {type(e).__name__}: {e}") from e
    stale = stale_line(sources.freshness(t.json))
    return "\n" + body + "\n\n" + source_line(t.json, data) + "\n\n" + (stale + "\n\n" if stale else "")


def render_text(text: str, path: str, sources: Sources) -> str:
    """``text`` with every marked block re-rendered. Raises :class:`RenderError` naming ``path:line``."""
    closed = {m.start() for m in MARKER.finditer(text)}
    for m in OPEN.finditer(text):
        if m.start() not in closed:
            line = text.count("\n", 0, m.start()) + 1
            raise RenderError(f"{path}:{line}: marker <!-- {m.group(1)}:{m.group(2)} --> has no closing "
                              f"<!-- /{m.group(1)}:{m.group(2)} --> (or the opening marker is not alone on its line)")

    def sub(m: re.Match[str]) -> str:
        try:
            body = render_block(m.group(1), m.group(2), sources)
        except RenderError as e:
            line = text.count("\n", 0, m.start()) + 1
            raise RenderError(f"{path}:{line}: {e}") from e
        return f"<!-- {m.group(1)}:{m.group(2)} -->{body}<!-- /{m.group(1)}:{m.group(2)} -->"

    return MARKER.sub(sub, text)


def run(check: bool, files: Sequence[Path] | None = None, root: Path = REPO) -> list[Path]:
    """Render (or with ``check`` only compare) every file; returns the files that differ(ed).

    ``root``: the checkout whose ``docs/results`` and sources are read (default this one); ``files``: the
    Markdown files (default :func:`doc_files` of ``root``). With ``check``, a file differs only when a table or
    generated block disagrees with its source; a missing or outdated stale line does not count.
    """
    sources = Sources(root)
    changed = []
    for p in files if files is not None else doc_files(root):
        old = p.read_text()
        new = render_text(old, str(p.relative_to(root) if p.is_relative_to(root) else p), sources)
        twin = writer_json(p, old, sources)
        if twin:
            new = page_status(new, sources.freshness(twin))
        if (_comparable(new) != _comparable(old)) if check else (new != old):
            changed.append(p)
            if not check:
                p.write_text(new)
    return changed


def stale_results(root: Path = REPO) -> list[Freshness]:
    """The freshness of every results JSON under ``root/docs/results`` (current ones included)."""
    sources = Sources(root)
    return [sources.freshness(name) for name in sources.names()]


def build_parser() -> ArgumentParser:
    """Command-line options."""
    ap = ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                        epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 when a block differs from its source")
    ap.add_argument("--stale", action="store_true",
                    help="list the results JSON whose measured code has changed since, with every changed file, and the "
                         "superseded ones (exit 0)")
    ap.add_argument("--list", action="store_true", help="print every table name and its JSON file")
    ap.add_argument("--checkout", type=Path, default=REPO,
                    help="the checkout to render or check (default: the one this script is in)")
    ap.add_deprecated_alias("--root", "--checkout")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: render, ``--check``, ``--stale`` or ``--list``."""
    a = build_parser().parse_args(argv)
    root = a.checkout.resolve()
    if a.stale:
        try:
            every = stale_results(root)
        except RenderError as e:
            print(f"render_docs: error: {e}", file=sys.stderr)
            return 2
        stale = [f for f in every if f.stale]
        archived = [f for f in every if f.superseded_by]
        for f in stale + archived:
            at = f"measured at commit {f.commit}" if f.commit else "no commit recorded"
            print(f"docs/results/{f.name}: {at}; {f.describe().replace('`', '')}")
        blocked = sum(1 for f in stale if f.rerun_needs)
        also = ", ".join(x for x in (f"{len(archived)} superseded" if archived else "",
                                     f"{blocked} not rerun here, with the reason" if blocked else "") if x)
        also = f" ({also})" if also else ""
        print(f"{len(stale)} of {len(every)} results files stale{also}" if stale else
              f"none of {len(every)} results files stale{also}" if archived else f"all {len(every)} results files current")
        return 0
    if a.list:
        for name, t in TABLES.items():
            print(f"{name:24s} docs/results/{t.json}" + (f" [{t.subkey}]" if t.subkey else ""))
        for name in GENERATED:
            print(f"{name:24s} (generated from the code)")
        print(f"{'results-index':24s} (generated from docs/results and the source tree)")
        return 0
    try:
        changed = run(a.check, root=root)
    except RenderError as e:
        print(f"render_docs: error: {e}", file=sys.stderr)
        return 2
    for p in changed:
        rel = p.relative_to(root)
        print(f"{rel}: out of date with its results JSON (run python tools/render_docs.py)" if a.check
              else f"rendered {rel}")
    return 1 if (a.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
