"""Subtitles (SRT, WebVTT) from long-form output: one file per language per talk.

Cues come from the VAD segments (:class:`~mmst.simultaneous.longform.SegmentEnd`): a cue never spans two
segments. A segment's words fill cues greedily, a cue holding at most :data:`MAX_LINES` lines of
:func:`max_line_chars` characters (42; 16 for Japanese and Chinese, written without spaces) and lasting
at most :data:`MAX_CUE_MS` (7 s). Two timings:

- ``emission`` (simultaneous captions): a cue appears when its first word was written (``time_ms``,
  the audio received by then) and stays until the next cue appears, at most 7 s. Cues written
  together (the flush at a segment's end) follow each other :data:`MIN_CUE_MS` apart. A word written
  more than 7 s after its cue's first word opens a new cue.
- ``source``: a segment's cues share the segment's source span (``start_ms`` to ``end_ms``) in
  proportion to their characters; a cue longer than 7 s is split in two until none is (a cue of one
  word keeps at most 7 s).

Files are written with the ``srt`` and ``webvtt-py`` libraries.
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
#: shortest time between two cues' appearances in emission timing, ms
MIN_CUE_MS = 1000.0
#: languages written without spaces (characters are the units of a line)
CHAR_LANGS = frozenset({"ja", "zh"})
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


def subtitle_cues(words: Sequence[Any], segments: Sequence[Any], lang: str, timing: str = "emission") -> list[Cue]:
    """Cues of one language of one talk (module docstring).

    Args:
        words: the language's :class:`~mmst.simultaneous.longform.LongFormWord` s (``text``, ``segment``,
            ``time_ms``), in writing order.
        segments: the talk's :class:`~mmst.simultaneous.longform.SegmentEnd` s (``segment``, ``start_ms``,
            ``end_ms``); needed for ``source`` timing.
        lang: target language (line width, and whether words are joined by spaces).
        timing: ``emission`` or ``source``.

    Returns:
        Cues in time order, not overlapping.

    Raises:
        ValueError: an unknown timing, or (``source``) a word of a segment without its ``SegmentEnd``.
    """
    if timing not in TIMINGS:
        raise ValueError(f"subtitle timing must be one of {', '.join(TIMINGS)}, got {timing!r}")
    sep = "" if lang in CHAR_LANGS else " "
    width = max_line_chars(lang)
    spans = {s.segment: (float(s.start_ms), float(s.end_ms)) for s in segments}
    by_seg: dict[int, list[Any]] = {}
    for w in words:
        by_seg.setdefault(int(w.segment), []).append(w)
    cues: list[Cue] = []
    for seg in sorted(by_seg):
        units = _units(by_seg[seg], lang, width)
        if not units:
            continue
        if timing == "emission":
            cues += [Cue(c[0][0][1], float("nan"), _lines(c, sep)) for c in _fill(units, sep, width, MAX_CUE_MS)]
            continue
        if seg not in spans:
            raise ValueError(f"segment {seg} has words but no SegmentEnd: source timing needs its span")
        cues += _source_cues([[u for line in c for u in line] for c in _fill(units, sep, width, None)],
                             spans[seg], sep, width)
    if timing == "emission":
        cues = _emission_times(cues)
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


def _emission_times(cues: list[Cue]) -> list[Cue]:
    out: list[Cue] = []
    starts: list[float] = []
    for c in cues:
        starts.append(c.start_ms if not starts else max(c.start_ms, starts[-1] + MIN_CUE_MS))
    for i, c in enumerate(cues):
        end = starts[i] + MAX_CUE_MS if i + 1 == len(cues) else min(starts[i + 1], starts[i] + MAX_CUE_MS)
        out.append(Cue(starts[i], end, c.lines))
    return out


def format_subtitles(cues: Sequence[Cue], fmt: str) -> str:
    """The text of an SRT (``srt``) or WebVTT (``vtt``) file of ``cues``.

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
                                                      text=c.text) for c in cues]).content
    raise ValueError(f"subtitle format must be one of {', '.join(FORMATS)}, got {fmt!r}")


def _vtt_time(ms: float) -> str:
    ms = int(round(ms))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}.{ms:03d}"


def write_subtitles(out_dir: str | os.PathLike, talk_id: str, words: Mapping[str, Sequence[Any]],
                    segments: Sequence[Any], fmt: str = "srt", timing: str = "emission") -> list[Path]:
    """Write ``OUT_DIR/<lang>/<talk_id>.<fmt>`` for every language of ``words`` (atomically).

    Args:
        out_dir: output directory.
        talk_id: the file's stem.
        words: ``{lang: [LongFormWord, ...]}`` of one talk.
        segments: the talk's ``SegmentEnd`` s.
        fmt: ``srt`` or ``vtt``.
        timing: ``emission`` or ``source`` (module docstring).

    Returns:
        The paths written.

    Raises:
        ValueError: an unknown format or timing.
    """
    if fmt not in FORMATS:
        raise ValueError(f"subtitle format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    paths = []
    for lang, ws in words.items():
        p = Path(out_dir) / lang / f"{talk_id}.{fmt}"
        atomic_write_text(p, format_subtitles(subtitle_cues(ws, segments, lang, timing), fmt))
        paths.append(p)
    return paths
