"""Read a TSV list of real recordings with translations (``id, audio, <lang>...``) into builder rows.

Format: UTF-8, one header line, tab-separated, no quoting. Required columns ``id`` and ``audio``
(a path; relative paths resolve against the TSV's folder). The English transcript comes from
``src_col`` (default ``en``); target languages are columns named by language code. Optional columns:

- ``duration_s``: the length of the whole audio file in seconds; :func:`check_audio` compares it with
  the decoded length;
- ``offset`` and ``duration`` (seconds): the utterance is this segment of a longer recording (several
  rows may name one file); ``offset`` alone runs to the end of the file, ``duration`` alone starts at 0;
- ``speaker``: a speaker label (default ``unknown``).

Other columns (``sample_rate``, ``en_fleurs_normalized`` ...) are ignored. Example:
``/work/shared/data/fleurs_flores/fleurs_flores.tsv``.

Errors (:class:`AudioListError`, naming file, line and field): non-UTF-8 text, a row whose cell
count differs from the header, a missing required column, an empty id or audio path, a duplicate id,
a requested language without a column, a ``duration_s`` or ``offset`` that is not a non-negative
number, a ``duration`` that is not a positive number.

Bad audio (:func:`check_audio`, which decodes every sample of the clip or segment): unreadable or
empty file; a decoded length that differs from ``duration_s`` by more than
:data:`DURATION_TOLERANCE_S` (a truncated Ogg/Opus file decodes to a fraction of its stated length
without any libsndfile error); a segment past the end of its file, or decoding to fewer samples than
its ``duration`` (truncated file); a silent clip (peak below :data:`SILENT_PEAK`). A clip whose peak
is below :data:`QUIET_PEAK` is kept with a warning. :func:`drop_bad_audio` applies the check to a
whole list, stopping or (``skip_bad``) leaving the bad rows out with a report.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from tqdm import tqdm

from mmst.audio import AudioError, audio_info, load_audio
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
log = logging.getLogger(__name__)


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
        ``(rows, tgt_langs)``; each row has ``id, wav (absolute), offset, duration`` (seconds: the
        ``offset``/``duration`` columns, else 0 and the rest of the file from the audio header; ``None``
        if the header cannot be read, the builder then reports the audio error), ``speaker``
        (``speaker`` column or ``unknown``), ``src_text``, ``tgt_text_<lang>``, ``source``
        (``tsv:line``), ``listed_duration_s`` (the ``duration_s`` column, or ``None``) and ``segment``
        (``(offset, duration)`` from the columns, ``None`` for a whole file); :func:`drop_bad_audio`
        pops the last two.

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
        listed = _seconds(d, "duration_s", p, lineno)
        offset = _seconds(d, "offset", p, lineno)
        seg_dur = _seconds(d, "duration", p, lineno, positive=True)
        segment = None if offset is None and seg_dur is None else (offset or 0.0, seg_dur)
        try:
            file_s: float | None = audio_info(wav).duration_s
        except AudioError:
            file_s = None
        dur = seg_dur if seg_dur is not None else (None if file_s is None else max(0.0, file_s - (offset or 0.0)))
        row: dict[str, Any] = {"id": uid, "wav": os.fspath(wav), "offset": offset or 0.0, "duration": dur,
                               "listed_duration_s": listed, "segment": segment,
                               "speaker": d.get("speaker", "") or "unknown", "src_text": d[src_col],
                               "source": f"{p}:{lineno}"}
        for lang in langs:
            row[TGT_PREFIX + lang] = d[lang]
        rows.append(row)
    return rows, langs


def _seconds(d: dict[str, str], col: str, path: str, lineno: int, positive: bool = False) -> float | None:
    """The number in column ``col`` of a row (``None`` when the column is absent or the cell empty).

    Raises:
        AudioListError: not a non-negative (``positive``: positive) finite number; names file, line, field.
    """
    cell = d.get(col, "").strip()
    if not cell:
        return None
    try:
        x = float(cell)
    except ValueError:
        x = float("nan")
    if not (np.isfinite(x) and (x > 0.0 if positive else x >= 0.0)):
        what = "a positive" if positive else "a non-negative"
        raise AudioListError(f"{path}:{lineno}: field {col!r} is not {what} number of seconds: {d[col]!r}")
    return x


def check_audio(path: str | os.PathLike[str], listed_duration_s: float | None = None,
                segment: tuple[float, float | None] | None = None) -> tuple[str | None, str | None]:
    """Decode a whole clip, or one segment of it, and judge it.

    Args:
        path: audio file.
        listed_duration_s: the length of the whole file the list states, in seconds (``None``: not
            checked). With ``segment`` it is compared with the header's length (the file is not
            decoded in full for every segment of a long recording).
        segment: ``(offset_s, duration_s)`` of the utterance in the file (``duration_s`` ``None`` = to
            the end); ``None`` = the whole file.

    Returns:
        ``(problem, warning)``: ``problem`` is ``None`` for usable audio, else the reason it is bad
        (unreadable, empty, decoded length differing from ``listed_duration_s`` by more than
        :data:`DURATION_TOLERANCE_S`, a segment past the end of the file or decoding to less than its
        duration, peak below :data:`SILENT_PEAK`); ``warning`` is set for a near-silent clip (peak
        below :data:`QUIET_PEAK`).
    """
    p = os.fspath(path)
    try:
        info = audio_info(p)
        if segment is None:
            x, sr = sf.read(p, dtype="float32", always_2d=True)
        else:
            sr = info.sample_rate
            x = load_audio(p, segment[0], segment[1], target_sr=sr)[:, None]
    except AudioError as e:
        return str(e), None
    except Exception as e:  # libsndfile errors on corrupt files
        return f"{p}: cannot decode audio ({type(e).__name__}: {e})", None
    if x.shape[0] == 0:
        return f"{p}: empty audio (0 samples decoded)", None
    decoded_s = x.shape[0] / float(sr)
    if segment is not None:
        if segment[1] is not None and segment[1] - decoded_s > DURATION_TOLERANCE_S:
            return (f"{p}: segment [{segment[0]:g} s, +{segment[1]:g} s] decoded to only {decoded_s:.2f} s "
                    f"(header: {info.duration_s:.2f} s): truncated file"), None
        decoded_s = info.duration_s
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


def drop_bad_audio(rows: list[dict[str, Any]], skip_bad: bool,
                   progress: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Decode every clip or segment of a list (:func:`check_audio`); returns ``(good rows, skipped)``.

    ``skipped`` holds ``{"id", "source", "reason"}`` per bad row (empty unless ``skip_bad``). Each
    kept row loses its ``listed_duration_s`` and ``segment`` keys; near-silent clips are logged.

    Raises:
        AudioListError: bad clips and not ``skip_bad`` (the message lists every one, with its TSV line).
    """
    good, bad = [], []
    for r in tqdm(rows, desc="check audio", unit="clip", disable=not progress):
        problem, warning = check_audio(r["wav"], r.pop("listed_duration_s", None), r.pop("segment", None))
        if problem:
            bad.append({"id": r["id"], "source": r["source"], "reason": problem})
            continue
        if warning:
            log.warning("%s (id %s): %s", r["source"], r["id"], warning)
        good.append(r)
    if bad and not skip_bad:
        lines = "\n".join(f"  {b['source']} (id {b['id']}): {b['reason']}" for b in bad)
        raise AudioListError(f"{len(bad)} bad clip(s) (use --skip-bad to leave them out):\n{lines}")
    for b in bad:
        log.warning("skipped %s (id %s): %s", b["source"], b["id"], b["reason"])
    return good, bad
