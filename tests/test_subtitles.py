"""Subtitles from long-form output: cue splitting (2 lines x 42 characters, 2 x 16 for ja/zh, 7 s), both
timings, and files that the ``srt`` and ``webvtt-py`` parsers read back."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import srt
import webvtt

from mmst.simultaneous.longform import LongFormTranslator, LongFormWord, OracleSegmenter, SegmentEnd
from mmst.simultaneous.subtitles import format_subtitles, subtitle_cues, write_subtitles


@dataclass(frozen=True)
class Seg:
    segment: int
    start_ms: float
    end_ms: float


def _w(lang, text, seg, ms):
    return LongFormWord(lang, text, seg, ms, ms + 50.0)


EN = ("the quick brown fox jumps over the lazy dog while the cat watches from the old wooden fence "
      "near the river").split()  # 19 words, 102 characters with spaces


def _srt(cues):
    return list(srt.parse(format_subtitles(cues, "srt")))


def test_emission_cues_split_at_two_lines_of_42_characters():
    """19 words written 300 ms apart from 1000 ms: greedy lines of <= 42 characters, 2 lines a cue:
    "the quick brown fox jumps over the lazy" (39 characters, 8 words) / "dog while the cat watches from
    the old" (38, 8 words), then "wooden fence near the river" (word 16, written at 1000 + 16 x 300 ms).
    Each cue appears when its first word was written and stays until the next one."""
    words = [_w("de", t, 0, 1000.0 + 300.0 * i) for i, t in enumerate(EN)]
    subs = _srt(subtitle_cues(words, [Seg(0, 900.0, 7000.0)], "de"))
    assert [s.content.split("\n") for s in subs] == [
        ["the quick brown fox jumps over the lazy", "dog while the cat watches from the old"],
        ["wooden fence near the river"]]
    assert subs[0].start.total_seconds() == 1.0 and subs[1].start.total_seconds() == 1.0 + 0.3 * 16
    assert subs[0].end == subs[1].start
    assert (subs[1].end - subs[1].start).total_seconds() == 7.0  # the last cue: at most 7 s
    assert " ".join(s.content.replace("\n", " ") for s in subs) == " ".join(EN)


def test_emission_cue_never_spans_seven_seconds_or_two_segments():
    """Words 2 s apart: a word more than 7 s after its cue's first opens a new cue (0, 2, 4, 6 s | 8, ...);
    a new VAD segment opens a new cue too; cues written together (a segment's final flush) appear 1 s
    apart."""
    words = [_w("de", f"w{i}", 0, 2000.0 * i) for i in range(6)]  # 0 .. 10 s
    words += [_w("de", t, 1, 12000.0) for t in EN]  # one flush of 19 words: two cues
    cues = subtitle_cues(words, [], "de")
    assert [c.start_ms for c in cues] == [0.0, 8000.0, 12000.0, 13000.0]
    assert [c.lines for c in cues[:2]] == [("w0 w1 w2 w3",), ("w4 w5",)]
    for a, b in zip(cues, cues[1:]):
        assert a.end_ms <= b.start_ms and a.end_ms - a.start_ms <= 7000.0


def test_japanese_lines_of_16_characters():
    """40 characters in one segment: lines of 16 characters (no spaces), 2 lines a cue: 16 + 16 | 8."""
    text = "今日は良い天気です私は東京に住んでいます駅まで歩きます会議は三時に始まります"[:40]
    words = [_w("ja", c, 0, 100.0 * i) for i, c in enumerate(text)]
    cues = subtitle_cues(words, [Seg(0, 0.0, 5000.0)], "ja")
    assert [c.lines for c in cues] == [(text[:16], text[16:32]), (text[32:],)]


def test_source_timing_shares_the_segment_span_and_keeps_cues_under_seven_seconds():
    """Source timing: segment 0 spans 1000-16000 ms (15 s) and holds 102 characters: two cues of 77 and
    27 characters would last 11.3 s and 3.9 s, so the first is split in two; the cues tile the segment
    in proportion to their characters, each <= 7 s."""
    words = [_w("de", t, 0, 20000.0) for t in EN]
    cues = subtitle_cues(words, [Seg(0, 1000.0, 16000.0)], "de", timing="source")
    assert len(cues) == 3
    assert cues[0].start_ms == 1000.0 and cues[-1].end_ms == pytest.approx(16000.0)
    for a, b in zip(cues, cues[1:]):
        assert a.end_ms == pytest.approx(b.start_ms)
    assert all(c.end_ms - c.start_ms <= 7000.0 for c in cues)
    chars = [sum(len(t) for t in " ".join(c.lines).split()) for c in cues]
    durs = [c.end_ms - c.start_ms for c in cues]
    assert durs == pytest.approx([15000.0 * n / sum(chars) for n in chars])
    with pytest.raises(ValueError, match="SegmentEnd"):
        subtitle_cues(words, [], "de", timing="source")


class _Scripted:
    """Writes two words per call (German) and two characters (Japanese)."""

    def reset(self):
        self.n = 0

    def accept_audio(self, x, finished=False):
        self.n += 1
        return {"de": [f"wort{self.n}a", f"wort{self.n}b"], "ja": ["語" if self.n % 2 else "文", "字"]}


@pytest.mark.parametrize("fmt,timing", [("srt", "emission"), ("vtt", "source")])
def test_driver_output_written_as_files_the_parsers_read(tmp_path, fmt, timing):
    """The long-form driver's events of a 12 s stream with two segments (1-6 s, 7-11.5 s) written per
    language; read back with ``srt`` / ``webvtt-py``: every word in order, lines within limits, cues
    within 7 s and inside their segment (source timing) or not before their words (emission)."""
    lf = LongFormTranslator(_Scripted(), vad=OracleSegmenter([(1.0, 6.0), (7.0, 11.5)]))
    audio = np.zeros(12 * 16000, np.float32)
    evs = lf.push(audio) + lf.finish()
    words = {lang: [e for e in evs if isinstance(e, LongFormWord) and e.lang == lang] for lang in ("de", "ja")}
    segs = [e for e in evs if isinstance(e, SegmentEnd)]
    assert len(segs) == 2
    paths = write_subtitles(tmp_path, "talk1", words, segs, fmt, timing)
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == [f"de/talk1.{fmt}", f"ja/talk1.{fmt}"]
    for lang, p in zip(("de", "ja"), paths):
        if fmt == "srt":
            cues = [(s.start.total_seconds() * 1000, s.end.total_seconds() * 1000, s.content.split("\n"))
                    for s in srt.parse(p.read_text(encoding="utf-8"))]
        else:
            cues = [(c.start_in_seconds * 1000 + int(c.start[-3:]), c.end_in_seconds * 1000 + int(c.end[-3:]),
                     c.lines) for c in webvtt.read(str(p))]
        width = 16 if lang == "ja" else 42
        assert cues and all(len(lines) <= 2 and all(len(ln) <= width for ln in lines) for _, _, lines in cues)
        assert all(0 < b - a <= 7000 for a, b, _ in cues)
        sep = "" if lang == "ja" else " "
        assert sep.join(sep.join(lines) for _, _, lines in cues) == sep.join(w.text for w in words[lang])
        for (_, b, _), (c, _, _) in zip(cues, cues[1:]):
            assert b <= c
        if timing == "source":
            assert all(1000 <= a and b <= 11500 for a, b, _ in cues)
        else:
            assert cues[0][0] == words[lang][0].time_ms
