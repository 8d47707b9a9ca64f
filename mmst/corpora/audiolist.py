"""Read a TSV list of real recordings with translations (``id, audio, <lang>...``) into builder rows.

Format: UTF-8, one header line, tab-separated, no quoting. Required columns ``id`` and ``audio``
(a path; relative paths resolve against the TSV's folder). The English transcript comes from
``src_col`` (default ``en``); target languages are columns named by language code. An optional
``duration_s`` column gives each clip's length in seconds; :func:`check_audio` compares it with the
decoded length. Other columns (``sample_rate``, ``en_fleurs_normalized`` ...) are ignored. Example:
``/work/shared/data/fleurs_flores/fleurs_flores.tsv``.

Errors (:class:`AudioListError`, naming file, line and field): non-UTF-8 text, a row whose cell
count differs from the header, a missing required column, an empty id or audio path, a duplicate id,
a requested language without a column, a ``duration_s`` that is not a non-negative number.

Bad audio (:func:`check_audio`, which decodes every sample): unreadable or empty file; a decoded
length that differs from ``duration_s`` by more than :data:`DURATION_TOLERANCE_S` (a truncated
Ogg/Opus file decodes to a fraction of its stated length without any libsndfile error); a silent
clip (peak below :data:`SILENT_PEAK`). A clip whose peak is below :data:`QUIET_PEAK` is kept with a
warning.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from mmst.audio import AudioError, audio_info
from mmst.corpora.mustc_layout import RawCorpusError, read_text_lines
from mmst.data.manifest import TGT_PREFIX

_LANG_RE = re.compile(r"[a-z]{2,3}")
DURATION_TOLERANCE_S = 0.1
"""Largest accepted difference (seconds) between the decoded length and the list's ``duration_s``:
about 5 frames of the 20 ms Opus/MP3 packets plus encoder delay; a truncated file misses far more."""
SILENT_PEAK = 1e-4
"""Peak amplitude (-80 dBFS, about 3 LSB in 16-bit units) below which a clip is silent: bad audio."""
QUIET_PEAK = 0.01
"""Peak amplitude (-40 dBFS) below which a clip is reported as near-silent (kept, with a warning)."""
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
        ``source`` (``tsv:line``), ``listed_duration_s`` (the ``duration_s`` column, or ``None``;
        pop it before building).

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
        listed: float | None = None
        if d.get("duration_s", "").strip():
            try:
                listed = float(d["duration_s"])
            except ValueError:
                listed = -1.0
            if not listed >= 0.0:
                raise AudioListError(f"{p}:{lineno}: field 'duration_s' is not a non-negative number: "
                                     f"{d['duration_s']!r}")
        row: dict[str, Any] = {"id": uid, "wav": os.fspath(wav), "offset": 0.0, "duration": dur,
                               "listed_duration_s": listed,
                               "speaker": d.get("speaker", "") or "unknown", "src_text": d[src_col],
                               "source": f"{p}:{lineno}"}
        for lang in langs:
            row[TGT_PREFIX + lang] = d[lang]
        rows.append(row)
    return rows, langs


def check_audio(path: str | os.PathLike[str], listed_duration_s: float | None = None) -> tuple[str | None, str | None]:
    """Decode a whole clip and judge it.

    Args:
        path: audio file.
        listed_duration_s: the length the list states, in seconds (``None``: not checked).

    Returns:
        ``(problem, warning)``: ``problem`` is ``None`` for usable audio, else the reason it is bad
        (unreadable, empty, decoded length differing from ``listed_duration_s`` by more than
        :data:`DURATION_TOLERANCE_S`, peak below :data:`SILENT_PEAK`); ``warning`` is set for a
        near-silent clip (peak below :data:`QUIET_PEAK`).
    """
    p = os.fspath(path)
    try:
        info = audio_info(p)
        x, sr = sf.read(p, dtype="float32", always_2d=True)
    except AudioError as e:
        return str(e), None
    except Exception as e:  # libsndfile errors on corrupt files
        return f"{p}: cannot decode audio ({type(e).__name__}: {e})", None
    if x.shape[0] == 0:
        return f"{p}: empty audio (0 samples decoded)", None
    decoded_s = x.shape[0] / float(sr)
    if listed_duration_s is not None and abs(decoded_s - listed_duration_s) > DURATION_TOLERANCE_S:
        return (f"{p}: decoded {decoded_s:.2f} s of audio but the list says duration_s={listed_duration_s:g} "
                f"(header: {info.duration_s:.2f} s; tolerance {DURATION_TOLERANCE_S} s): truncated or wrong file"), None
    if not np.isfinite(x).all():
        return f"{p}: audio contains NaN or Inf", None
    peak = float(np.abs(x).max())
    if peak < SILENT_PEAK:
        return f"{p}: silent audio (peak {peak:.1e} < {SILENT_PEAK:g})", None
    if peak < QUIET_PEAK:
        return None, f"{p}: near-silent audio (peak {peak:.1e}, {20 * np.log10(peak):.0f} dBFS < {QUIET_PEAK:g})"
    return None, None
