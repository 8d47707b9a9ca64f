"""TSV manifests (``DATA/<split>.tsv`` and fairseq ``DATA/<split>_st_<lang>.tsv``).

Format: UTF-8, one header line, tab-separated, ``\\n`` line ends, no quoting. Cells never contain
tabs or newlines (:func:`clean_text` replaces them by spaces before writing; :func:`write_manifest`
refuses a cell that still contains one). Readers use column NAMES, never positions.

Multi-way manifest columns, in order (:func:`manifest_columns`)::

    id, audio, n_frames, speaker, src_text, tgt_text_<lang> (one per language), wav, offset, duration

- ``audio``: ``fbank80.zip:<byte_offset>:<byte_size>`` relative to the DATA directory (fairseq form).
- ``n_frames``: number of 10 ms fbank frames.
- ``wav``: absolute path of the source audio; ``offset`` / ``duration``: the segment, in seconds.
- an empty ``tgt_text_<lang>`` means "no translation for that language".

fairseq speech_to_text columns (:data:`FAIRSEQ_ST_COLUMNS`):
``id, audio, n_frames, tgt_text, speaker, src_text, tgt_lang``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence

from mmst.atomic import atomic_write_text

TGT_PREFIX = "tgt_text_"
"""Prefix of the per-language target text columns."""
BASE_COLUMNS_HEAD = ("id", "audio", "n_frames", "speaker", "src_text")
"""Columns before the ``tgt_text_<lang>`` block."""
BASE_COLUMNS_TAIL = ("wav", "offset", "duration")
"""Columns after the ``tgt_text_<lang>`` block."""
FAIRSEQ_ST_COLUMNS = ("id", "audio", "n_frames", "tgt_text", "speaker", "src_text", "tgt_lang")
"""Columns of the fairseq speech_to_text manifests written next to the multi-way ones."""

_WS = re.compile(r"[\t\r\n\v\f\u2028\u2029\x85]+")


class ManifestError(ValueError):
    """A manifest file is malformed; the message names the file and line."""


def manifest_columns(tgt_langs: Sequence[str]) -> list[str]:
    """Column names of a multi-way manifest for ``tgt_langs`` (in that order)."""
    return [*BASE_COLUMNS_HEAD, *(TGT_PREFIX + lang for lang in tgt_langs), *BASE_COLUMNS_TAIL]


def tgt_langs_of(columns: Iterable[str]) -> list[str]:
    """Target languages of a manifest header, in column order (``tgt_text_de`` -> ``de``)."""
    return [c[len(TGT_PREFIX):] for c in columns if c.startswith(TGT_PREFIX)]


def clean_text(text: str) -> str:
    """Make ``text`` safe for a TSV cell: tabs, newlines and Unicode line separators become one
    space; leading/trailing whitespace is stripped. Nothing else is changed."""
    return _WS.sub(" ", text).strip()


def read_manifest(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """Read a TSV manifest into a list of ``{column: value}`` dicts (all values are strings).

    Raises:
        FileNotFoundError: missing file.
        ManifestError: empty file, duplicate header names, or a row whose cell count differs from the
            header (message gives file and 1-based line number).
        UnicodeDecodeError: the file is not UTF-8.
    """
    p = os.fspath(path)
    with open(p, encoding="utf-8", newline="") as fh:
        text = fh.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ManifestError(f"{p}: empty manifest (no header line)")
    header = lines[0].rstrip("\r").split("\t")
    if len(set(header)) != len(header):
        raise ManifestError(f"{p}:1: duplicate column names in header {header}")
    rows: list[dict[str, str]] = []
    for lineno, line in enumerate(lines[1:], start=2):
        cells = line.rstrip("\r").split("\t")
        if len(cells) != len(header):
            raise ManifestError(f"{p}:{lineno}: expected {len(header)} cells ({', '.join(header)}), got {len(cells)}")
        rows.append(dict(zip(header, cells)))
    return rows


def read_manifest_header(path: str | os.PathLike[str]) -> list[str]:
    """Column names of a manifest (first line only)."""
    with open(os.fspath(path), encoding="utf-8", newline="") as fh:
        return fh.readline().rstrip("\r\n").split("\t")


def write_manifest(path: str | os.PathLike[str], rows: Iterable[Mapping[str, object]],
                   columns: Sequence[str]) -> None:
    """Write rows as a TSV manifest with header ``columns``, atomically.

    Args:
        path: destination.
        rows: mappings with (at least) every column; values are ``str()``-ed; extra keys are ignored.
        columns: header, in order.

    Raises:
        KeyError: a row lacks a column.
        ManifestError: a cell contains a tab or newline (use :func:`clean_text`).
    """
    out = ["\t".join(columns)]
    for i, row in enumerate(rows):
        cells = []
        for c in columns:
            if c not in row:
                raise KeyError(f"{path}: row {i} ({row.get('id', '?')}) has no column {c!r}")
            v = str(row[c])
            if "\t" in v or "\n" in v or "\r" in v:
                raise ManifestError(f"{path}: row {i} ({row.get('id', '?')}) column {c!r} contains a tab/newline")
            cells.append(v)
        out.append("\t".join(cells))
    atomic_write_text(path, "\n".join(out) + "\n")
