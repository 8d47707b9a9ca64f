"""Subtitles (SRT, WebVTT) from long-form output: one file per language per talk.

Cues come from the VAD segments (:class:`~mmst.simultaneous.longform.SegmentEnd`): a cue never spans two
segments. A segment's words fill cues greedily, a cue holding at most :data:`MAX_LINES` lines of
:func:`max_line_chars` characters (42; 16 for Japanese and Chinese, written without spaces) and lasting
at most :data:`MAX_CUE_MS` (7 s). No cue ends after the end of the audio (``audio_ms``). Two timings:

- ``emission`` (simultaneous captions): a cue appears when its LAST word was written (``time_ms``, the
  audio received by then), so it never shows a word before the translator wrote it, and stays until
  the next cue appears, at most 7 s. A word written more than 7 s after its cue's first word opens a
  new cue, so no word waits longer than that for its cue. Cues that become complete together (the
  flush at a segment's end) follow each other :data:`MIN_CUE_MS` apart, or closer when the next cue or
  the end of the audio comes sooner: they share the time up to it. Words written only when the stream
  ended (speech up to the last sample) get cues of zero length at the end of the audio: they are in the
  file, but no player shows them; ``source`` timing shows them.

  Why cues appear whole rather than growing word by word: an SRT or WebVTT cue cannot be edited once
  on screen, so growing captions are written as one cue per write, each repeating the cue's earlier
  words; players then redraw the text at every word, and whatever reads the file as text (search,
  alignment, a translator's tools) sees every word many times. Whole cues keep each word once; the
  price is that a cue's first words appear when its last one is written.
- ``source``: a segment's cues share the segment's source span (``start_ms`` to ``end_ms``) in
  proportion to their characters; a cue longer than 7 s is split in two until none is (a cue of one
  word keeps at most 7 s).

Files are written with the ``srt`` and ``webvtt-py`` libraries. WebVTT cue text escapes ``&``, ``<``
and ``>`` as ``&amp;``, ``&lt;`` and ``&gt;`` (the format's character references; a raw ``<`` starts a
tag and ``-->`` ends the cue); SRT has no escapes and gets the text as written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from mmst.atomic import atomic_write_text

#: lines per cue
MAX_LINES = 2
#: longest time a cue is shown, ms
MAX_CUE_MS = 7000.0
#: emission timing: time between the appearances of cues that became complete together, ms (less when the
#: next cue or the end of the audio comes sooner)
MIN_CUE_MS = 1000.0
#: languages written without spaces (characters are the units of a line)
CHAR_LANGS = frozenset({"ja", "zh"})
#: a word may carry a time this far past ``audio_ms`` (two float roundings of one sample count), ms
TIME_TOLERANCE_MS = 1.0
FORMATS = ("srt", "vtt")
TIMINGS = ("emission", "source")


def max_line_chars(lang: str) -> int:
    """Characters per subtitle line: 16 for Japanese and Chinese, 42 otherwise (common broadcast limits)."""
    return 16 if lang in CHAR_LANGS else 42


@dataclass(frozen=True)
class Cue:
    """One subtitle: shown from ``start_ms`` to ``end_ms`` (ms since the talk's start), ``lines`` of text."""

    start_ms: float
    end_ms: float
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _units(words: Sequence[Any], lang: str, max_chars: int) -> list[tuple[str, float]]:
    """(text, time_ms) per line unit: characters for ``ja``/``zh``, words otherwise (a word longer than a
    line is split into line-sized pieces)."""
    out = []
    for w in words:
        text = str(w.text).strip()
        pieces = list(text.replace(" ", "")) if lang in CHAR_LANGS else [
            p[i:i + max_chars] for p in text.split() for i in range(0, len(p), max_chars)]
        out += [(p, float(w.time_ms)) for p in pieces]
    return out


def _fill(units: list[tuple[str, float]], sep: str, max_chars: int, max_span_ms: float | None) -> list[list]:
    """Greedy cues of at most MAX_LINES lines of ``max_chars``; each cue is a list of lines, a line a list
    of units. With ``max_span_ms``, a unit written that long after its cue's first unit opens a new cue."""
    cues: list[list[list[tuple[str, float]]]] = []
    for u in units:
        if cues and max_span_ms is not None and u[1] - cues[-1][0][0][1] > max_span_ms:
            cues.append([[u]])
            continue
        if cues:
            line = cues[-1][-1]
            if len(sep.join(t for t, _ in line + [u])) <= max_chars:
                line.append(u)
                continue
            if len(cues[-1]) < MAX_LINES:
                cues[-1].append([u])
                continue
        cues.append([[u]])
    return cues


def _lines(cue: list, sep: str) -> tuple[str, ...]:
    return tuple(sep.join(t for t, _ in line) for line in cue)


def _relines(units: list[tuple[str, float]], sep: str, max_chars: int) -> list[list]:
    """The units of one cue laid out again into lines (after a split)."""
    return _fill(units, sep, max_chars, None)


def subtitle_cues(words: Sequence[Any], segments: Sequence[Any], lang: str, timing: str = "emission", *,
                  audio_ms: float) -> list[Cue]:
    """Cues of one language of one talk (module docstring).

    Args:
        words: the language's :class:`~mmst.simultaneous.longform.LongFormWord` s (``text``, ``segment``,
            ``time_ms``), in writing order.
        segments: the talk's :class:`~mmst.simultaneous.longform.SegmentEnd` s (``segment``, ``start_ms``,
            ``end_ms``); needed for ``source`` timing.
        lang: target language (line width, and whether words are joined by spaces).
        timing: ``emission`` or ``source``.
        audio_ms: length of the talk's audio, ms: no cue ends after it.

    Returns:
        Cues in time order, not overlapping, each inside ``[0, audio_ms]``.

    Raises:
        ValueError: an unknown timing; a word written after ``audio_ms`` (more than
            :data:`TIME_TOLERANCE_MS`); (``source``) a word of a segment without its ``SegmentEnd``.
    """
    if timing not in TIMINGS:
        raise ValueError(f"subtitle timing must be one of {', '.join(TIMINGS)}, got {timing!r}")
    late = next((w for w in words if float(w.time_ms) > audio_ms + TIME_TOLERANCE_MS), None)
    if late is not None:
        raise ValueError(f"{lang} word {late.text!r} written at {float(late.time_ms):.1f} ms, after the end of the "
                         f"audio ({audio_ms:.1f} ms)")
    sep = "" if lang in CHAR_LANGS else " "
    width = max_line_chars(lang)
    spans = {s.segment: (float(s.start_ms), min(float(s.end_ms), audio_ms)) for s in segments}
    by_seg: dict[int, list[Any]] = {}
    for w in words:
        by_seg.setdefault(int(w.segment), []).append(w)
    if timing == "emission":
        filled = [c for seg in sorted(by_seg) for c in _fill(_units(by_seg[seg], lang, width), sep, width, MAX_CUE_MS)]
        return _emission_times(filled, sep, audio_ms)
    cues: list[Cue] = []
    for seg in sorted(by_seg):
        units = _units(by_seg[seg], lang, width)
        if not units:
            continue
        if seg not in spans:
            raise ValueError(f"segment {seg} has words but no SegmentEnd: source timing needs its span")
        cues += _source_cues([[u for line in c for u in line] for c in _fill(units, sep, width, None)],
                             spans[seg], sep, width)
    return cues


def _source_cues(groups: list[list], span: tuple[float, float], sep: str, width: int) -> list[Cue]:
    a, b = span
    total = sum(len(t) for g in groups for t, _ in g)
    while True:  # split a cue in two while it would last more than 7 s
        durs = [(b - a) * sum(len(t) for t, _ in g) / total for g in groups]
        k = next((i for i, (g, d) in enumerate(zip(groups, durs)) if d > MAX_CUE_MS and len(g) > 1), None)
        if k is None:
            break
        g = groups[k]
        groups[k:k + 1] = [g[: len(g) // 2], g[len(g) // 2:]]
    out, t = [], a
    for g, d in zip(groups, durs):
        lines = tuple(ln for c in _relines(g, sep, width) for ln in _lines(c, sep))
        out.append(Cue(t, t + min(d, MAX_CUE_MS), lines))
        t += d
    return out


def _emission_times(cues: list[list], sep: str, audio_ms: float) -> list[Cue]:
    """Emission times of filled cues (lists of lines of ``(text, time_ms)`` units): each appears when its
    last unit was written; a run of cues complete at the same time shares the time up to the next run (or
    the end of the audio), at most :data:`MIN_CUE_MS` each; a cue stays until the next one appears, at
    most :data:`MAX_CUE_MS`, never past ``audio_ms``."""
    ready = [min(max(t for line in c for _, t in line), audio_ms) for c in cues]
    starts: list[float] = []
    i = 0
    while i < len(cues):
        j = i
        while j < len(cues) and ready[j] == ready[i]:
            j += 1
        limit = min(ready[j] if j < len(cues) else audio_ms, audio_ms)
        step = min(MIN_CUE_MS, max(0.0, limit - ready[i]) / (j - i))
        starts += [ready[i] + step * (n - i) for n in range(i, j)]
        i = j
    out = []
    for n, c in enumerate(cues):
        nxt = starts[n + 1] if n + 1 < len(cues) else audio_ms
        out.append(Cue(starts[n], min(nxt, starts[n] + MAX_CUE_MS, audio_ms), _lines(c, sep)))
    return out


def vtt_escape(text: str) -> str:
    """WebVTT cue text for plain ``text``: ``&``, ``<`` and ``>`` as the character references ``&amp;``,
    ``&lt;``, ``&gt;`` (W3C WebVTT, "cue text": a raw ``<`` opens a tag, and a line holding ``-->`` is read as
    the next cue's timings)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def format_subtitles(cues: Sequence[Cue], fmt: str) -> str:
    """The text of an SRT (``srt``) or WebVTT (``vtt``) file of ``cues`` (WebVTT text escaped, see
    :func:`vtt_escape`).

    Raises:
        ValueError: an unknown format.
    """
    if fmt == "srt":
        import srt

        return srt.compose([srt.Subtitle(i + 1, timedelta(milliseconds=round(c.start_ms)),
                                         timedelta(milliseconds=round(c.end_ms)), c.text)
                            for i, c in enumerate(cues)], reindex=False)
    if fmt == "vtt":
        import webvtt

        return webvtt.WebVTT(captions=[webvtt.Caption(start=_vtt_time(c.start_ms), end=_vtt_time(c.end_ms),
                                                      text=vtt_escape(c.text)) for c in cues]).content
    raise ValueError(f"subtitle format must be one of {', '.join(FORMATS)}, got {fmt!r}")


def _vtt_time(ms: float) -> str:
    ms = int(round(ms))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}.{ms:03d}"


def write_subtitles(out_dir: str | os.PathLike, talk_id: str, words: Mapping[str, Sequence[Any]],
                    segments: Sequence[Any], fmt: str = "srt", timing: str = "emission", *,
                    audio_ms: float) -> list[Path]:
    """Write ``OUT_DIR/<lang>/<talk_id>.<fmt>`` for every language of ``words`` (atomically).

    Args:
        out_dir: output directory.
        talk_id: the file's stem.
        words: ``{lang: [LongFormWord, ...]}`` of one talk.
        segments: the talk's ``SegmentEnd`` s.
        fmt: ``srt`` or ``vtt``.
        timing: ``emission`` or ``source`` (module docstring).
        audio_ms: length of the talk's audio, ms: no cue ends after it.

    Returns:
        The paths written.

    Raises:
        ValueError: an unknown format or timing, or a word written after ``audio_ms``.
        OSError: a file cannot be written.
    """
    if fmt not in FORMATS:
        raise ValueError(f"subtitle format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    paths = []
    for lang, ws in words.items():
        p = Path(out_dir) / lang / f"{talk_id}.{fmt}"
        atomic_write_text(p, format_subtitles(subtitle_cues(ws, segments, lang, timing, audio_ms=audio_ms), fmt))
        paths.append(p)
    return paths
