"""Read a TSV list of real recordings with translations (``id, audio, <lang>...``) into builder rows.

Format: UTF-8, one header line, tab-separated, no quoting. Required columns ``id`` and ``audio``
(a path; relative paths resolve against the TSV's folder). The English transcript comes from
``src_col`` (default ``en``); target languages are columns named by language code. Other columns
(``duration_s``, ``sample_rate``, ``en_fleurs_normalized`` ...) are ignored. Example:
``/work/shared/data/fleurs_flores/fleurs_flores.tsv``.

Errors (:class:`AudioListError`, naming file, line and field): non-UTF-8 text, a row whose cell
count differs from the header, a missing required column, an empty id or audio path, a duplicate id,
a requested language without a column.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mmst.audio import AudioError, audio_info
from mmst.corpora.mustc_layout import RawCorpusError, read_text_lines
from mmst.data.manifest import TGT_PREFIX

_LANG_RE = re.compile(r"[a-z]{2,3}")
_NOT_LANGS = {"id"}


class AudioListError(ValueError):
    """Bad audio-list TSV (message names file, line and field)."""


def infer_tgt_langs(columns: list[str], src_col: str = "en") -> list[str]:
    """Language-code columns (2-3 lowercase letters) other than ``src_col`` and ``id``, in order."""
    return [c for c in columns if _LANG_RE.fullmatch(c) and c != src_col and c not in _NOT_LANGS]


def read_audio_list(tsv: str | os.PathLike[str], tgt_langs: list[str] | None = None,
                    src_col: str = "en") -> tuple[list[dict[str, Any]], list[str]]:
    """Parse the TSV into multi-way rows for :func:`mmst.corpora.multiway.build_from_rows`.

    Args:
        tsv: the list file.
        tgt_langs: target language columns to use (``None`` = all language-code columns).
        src_col: column with the English transcript.

    Returns:
        ``(rows, tgt_langs)``; each row has ``id, wav (absolute), offset=0, duration`` (seconds from the
        audio header; ``None`` if the header cannot be read, the builder then reports the audio
        error), ``speaker`` (``speaker`` column or ``unknown``), ``src_text``, ``tgt_text_<lang>``,
        ``source`` (``tsv:line``).

    Raises:
        AudioListError: see module docstring.
    """
    p = os.fspath(tsv)
    try:
        lines = read_text_lines(p)
    except RawCorpusError as e:
        raise AudioListError(str(e)) from None
    if not lines:
        raise AudioListError(f"{p}: empty file (no header)")
    header = lines[0].split("\t")
    for col in ("id", "audio", src_col):
        if col not in header:
            raise AudioListError(f"{p}:1: missing column {col!r} (have {', '.join(header)})")
    langs = list(tgt_langs) if tgt_langs else infer_tgt_langs(header, src_col)
    for lang in langs:
        if lang not in header:
            raise AudioListError(f"{p}:1: no column for language {lang!r} (have {', '.join(header)})")
    base = Path(p).resolve().parent
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != len(header):
            raise AudioListError(f"{p}:{lineno}: expected {len(header)} cells, got {len(cells)}")
        d = dict(zip(header, cells))
        uid = d["id"].strip()
        if not uid:
            raise AudioListError(f"{p}:{lineno}: field 'id' is empty")
        if uid in seen:
            raise AudioListError(f"{p}:{lineno}: duplicate id {uid!r} (first on line {seen[uid]})")
        seen[uid] = lineno
        a = d["audio"].strip()
        if not a:
            raise AudioListError(f"{p}:{lineno}: field 'audio' is empty")
        wav = Path(a) if os.path.isabs(a) else base / a
        try:
            dur: float | None = audio_info(wav).duration_s
        except AudioError:
            dur = None
        row: dict[str, Any] = {"id": uid, "wav": os.fspath(wav), "offset": 0.0, "duration": dur,
                               "speaker": d.get("speaker", "") or "unknown", "src_text": d[src_col],
                               "source": f"{p}:{lineno}"}
        for lang in langs:
            row[TGT_PREFIX + lang] = d[lang]
        rows.append(row)
    return rows, langs
