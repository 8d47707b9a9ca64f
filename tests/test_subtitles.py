"""Subtitles from long-form output: cue splitting (2 lines x 42 characters, 2 x 16 for ja/zh, 7 s), both
timings, and files that the ``srt`` and ``webvtt-py`` parsers read back."""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np
import pytest
import srt
import webvtt

from mmst.simultaneous.longform import LongFormTranslator, LongFormWord, OracleSegmenter, SegmentEnd
from mmst.simultaneous.subtitles import format_subtitles, subtitle_cues, vtt_escape, write_subtitles


@dataclass(frozen=True)
class Seg:
    segment: int
    start_ms: float
    end_ms: float


def _w(lang, text, seg, ms):
    return LongFormWord(lang, text, seg, ms, ms + 50.0)


EN = ("the quick brown fox jumps over the lazy dog while the cat watches from the old wooden fence "
      "near the river").split()  # 21 words, 106 characters with spaces


def _srt(cues):
    return list(srt.parse(format_subtitles(cues, "srt")))


def _unit_times(words, lang):
    """(unit, time_ms) of ``words`` in writing order: characters for ja/zh, whitespace words otherwise."""
    return [(u, w.time_ms) for w in words for u in (list(w.text) if lang in ("ja", "zh") else w.text.split())]


def _units_per_cue(lines_per_cue, lang):
    return [len("".join(ls)) if lang in ("ja", "zh") else len(" ".join(ls).split()) for ls in lines_per_cue]


def _check_emission(cues_ms, words, lang, audio_ms):
    """Parsed cues ``[(start_ms, end_ms, lines), ...]`` against the words: the cues hold every unit in order,
    none appears before its last unit was written, none ends after the audio, none overlaps the next."""
    units = _unit_times(words, lang)
    sep = "" if lang in ("ja", "zh") else " "
    assert sep.join(sep.join(ls) for _, _, ls in cues_ms) == sep.join(u for u, _ in units)
    k = 0
    for (a, b, ls), n in zip(cues_ms, _units_per_cue([c[2] for c in cues_ms], lang)):
        written = max(t for _, t in units[k:k + n])
        assert a >= round(written) and a <= b <= audio_ms, (a, b, written, ls)
        k += n
    for (_, b, _), (c, _, _) in zip(cues_ms, cues_ms[1:]):
        assert b <= c


def _srt_ms(subs):
    return [(s.start.total_seconds() * 1000, s.end.total_seconds() * 1000, s.content.split("\n")) for s in subs]


def test_emission_cue_appears_when_its_last_word_is_written():
    """21 words written 300 ms apart from 1000 ms: greedy lines of <= 42 characters, 2 lines a cue:
    "the quick brown fox jumps over the lazy" (39 characters, 8 words) / "dog while the cat watches from
    the old" (38, 8 words), then "wooden fence near the river". The first cue appears when its 16th word
    is written (1000 + 15 x 300 = 5500 ms), not with its first word; the second with word 21 (7000 ms),
    and stays to the end of the audio (8000 ms), not 7 s."""
    words = [_w("de", t, 0, 1000.0 + 300.0 * i) for i, t in enumerate(EN)]
    subs = _srt(subtitle_cues(words, [Seg(0, 900.0, 7000.0)], "de", audio_ms=8000.0))
    assert [s.content.split("\n") for s in subs] == [
        ["the quick brown fox jumps over the lazy", "dog while the cat watches from the old"],
        ["wooden fence near the river"]]
    assert [(s.start.total_seconds(), s.end.total_seconds()) for s in subs] == [(5.5, 7.0), (7.0, 8.0)]
    _check_emission(_srt_ms(subs), words, "de", 8000.0)


def test_emission_cue_never_spans_seven_seconds_or_two_segments():
    """Words 2 s apart: a word more than 7 s after its cue's first opens a new cue (0, 2, 4, 6 s | 8, 10 s),
    which appears with its last word; a new VAD segment opens a new cue too; a cue stays until the next
    one appears, at most 7 s (the third cue, shown at 24 s, ends at 31 s, before the audio's end at 40 s)."""
    words = [_w("de", f"w{i}", 0, 2000.0 * i) for i in range(6)]  # 0 .. 10 s
    words += [_w("de", "later", 1, 24000.0)]
    cues = subtitle_cues(words, [], "de", audio_ms=40000.0)
    assert [c.lines for c in cues] == [("w0 w1 w2 w3",), ("w4 w5",), ("later",)]
    assert [(c.start_ms, c.end_ms) for c in cues] == [(6000.0, 10000.0), (10000.0, 17000.0), (24000.0, 31000.0)]


def test_final_flush_shares_the_time_left_before_the_audio_end():
    """A segment's flush writes 21 words at once at 12 s (two cues). With the audio ending at 12.5 s the two
    cues share those 500 ms (250 ms each, instead of appearing 1 s apart and lasting 7 s past the end);
    with 5 s left they appear 1 s apart and the last stays to the end. Words written as the audio ended
    get zero-length cues at its end: in the file, never early, never past the end."""
    words = [_w("de", t, 0, 12000.0) for t in EN]
    for audio_ms, want in [(12500.0, [(12000.0, 12250.0), (12250.0, 12500.0)]),
                           (17000.0, [(12000.0, 13000.0), (13000.0, 17000.0)]),
                           (12000.0, [(12000.0, 12000.0), (12000.0, 12000.0)])]:
        subs = _srt(subtitle_cues(words, [Seg(0, 500.0, 11000.0)], "de", audio_ms=audio_ms))
        assert [(s.start.total_seconds() * 1000, s.end.total_seconds() * 1000) for s in subs] == want
        _check_emission(_srt_ms(subs), words, "de", audio_ms)
    with pytest.raises(ValueError, match="after the end of the audio"):
        subtitle_cues(words, [], "de", audio_ms=11000.0)


def test_vtt_text_is_escaped_and_reads_back():
    """``&``, ``<`` and ``-->`` in words: the WebVTT file holds ``&amp;``, ``&lt;``, ``&gt;`` and parses back
    with webvtt-py to the same cue (one cue, one line; the text unescaped equals the words); SRT keeps the
    text as written and parses back with ``srt``."""
    text = ["AT&T", "<b>bold</b>", "a", "-->", "b"]
    words = [_w("en", t, 0, 1000.0 + 100.0 * i) for i, t in enumerate(text)]
    cues = subtitle_cues(words, [], "en", audio_ms=3000.0)
    vtt = format_subtitles(cues, "vtt")
    assert "AT&amp;T &lt;b&gt;bold&lt;/b&gt; a --&gt; b" in vtt.splitlines()
    parsed = webvtt.from_string(vtt)
    assert len(parsed) == 1 and parsed[0].lines == [vtt_escape(" ".join(text))]
    assert html.unescape(parsed[0].raw_text) == " ".join(text)
    assert [s.content for s in _srt(cues)] == [" ".join(text)]


def test_japanese_lines_of_16_characters():
    """40 characters in one segment: lines of 16 characters (no spaces), 2 lines a cue: 16 + 16 | 8."""
    text = "今日は良い天気です私は東京に住んでいます駅まで歩きます会議は三時に始まります"[:40]
    words = [_w("ja", c, 0, 100.0 * i) for i, c in enumerate(text)]
    cues = subtitle_cues(words, [Seg(0, 0.0, 5000.0)], "ja", audio_ms=5000.0)
    assert [c.lines for c in cues] == [(text[:16], text[16:32]), (text[32:],)]


def test_source_timing_shares_the_segment_span_and_keeps_cues_under_seven_seconds():
    """Source timing: segment 0 spans 1000-16000 ms (15 s) and holds 102 characters: two cues of 77 and
    27 characters would last 11.3 s and 3.9 s, so the first is split in two; the cues tile the segment
    in proportion to their characters, each <= 7 s."""
    words = [_w("de", t, 0, 20000.0) for t in EN]
    cues = subtitle_cues(words, [Seg(0, 1000.0, 16000.0)], "de", timing="source", audio_ms=20000.0)
    assert len(cues) == 3
    assert cues[0].start_ms == 1000.0 and cues[-1].end_ms == pytest.approx(16000.0)
    for a, b in zip(cues, cues[1:]):
        assert a.end_ms == pytest.approx(b.start_ms)
    assert all(c.end_ms - c.start_ms <= 7000.0 for c in cues)
    chars = [sum(len(t) for t in " ".join(c.lines).split()) for c in cues]
    durs = [c.end_ms - c.start_ms for c in cues]
    assert durs == pytest.approx([15000.0 * n / sum(chars) for n in chars])
    with pytest.raises(ValueError, match="SegmentEnd"):
        subtitle_cues(words, [], "de", timing="source", audio_ms=20000.0)


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
    within 7 s and inside their segment (source timing) or not before their words and not after the audio
    (emission)."""
    lf = LongFormTranslator(_Scripted(), vad=OracleSegmenter([(1.0, 6.0), (7.0, 11.5)]))
    audio = np.zeros(12 * 16000, np.float32)
    evs = lf.push(audio) + lf.finish()
    words = {lang: [e for e in evs if isinstance(e, LongFormWord) and e.lang == lang] for lang in ("de", "ja")}
    segs = [e for e in evs if isinstance(e, SegmentEnd)]
    assert len(segs) == 2
    paths = write_subtitles(tmp_path, "talk1", words, segs, fmt, timing, audio_ms=12000.0)
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
            _check_emission(cues, words[lang], lang, 12000.0)


def test_a_talk_whose_subtitles_fail_keeps_every_talks_scores(tmp_path):
    """Two talks scored together; talk "a"'s subtitle file cannot be written (a folder stands at its path).
    The failure is one note in scores.json, talk "b" still gets its file, and both talks' words are scored."""
    import soundfile as sf

    from mmst.evaluation.longform import Talk, evaluate_talks
    from mmst.evaluation.resegment import RefSentence

    talks = []
    for name in ("a", "b"):
        wav = tmp_path / f"{name}.wav"
        sf.write(wav, np.zeros(12 * 16000, np.float32), 16000)
        talks.append(Talk(name, str(wav), {"de": [RefSentence("wort1a wort1b", 1000.0, 5000.0),
                                                  RefSentence("wort9a wort9b", 7000.0, 4500.0)]}))
    out = tmp_path / "out"
    (out / "de" / "a.srt").mkdir(parents=True)
    lf = LongFormTranslator(_Scripted(), vad=OracleSegmenter([(1.0, 6.0), (7.0, 11.5)]))
    obj = evaluate_talks(lf, talks, ["de"], {"de": "word"}, out, progress=False, subtitles="srt")
    assert set(obj["talks"]) == {"a", "b"} and obj["per_lang"]["de"]["info"]["n_sentences"] == 4
    assert "BLEU" in obj["per_lang"]["de"] and (out / "scores.json").is_file()
    assert len(obj["notes"]) == 1 and obj["notes"][0].startswith("talk a: subtitles not written: IsADirectoryError")
    assert list(srt.parse((out / "de" / "b.srt").read_text(encoding="utf-8")))


def test_cli_real_vad_path_writes_subtitles_inside_the_audio(tiny_system, tmp_path):
    """``mmst-eval-longform`` end to end on the Silero VAD path (no ``--oracle-segments``) with ``--subtitles
    vtt`` and the default emission timing: 3 espeak-ng sentences joined with 0.7-0.9 s pauses, 0.3 s of
    silence around them, translated by the tiny (untrained) system. Every language's file parses with
    webvtt-py, holds the words of hypothesis.jsonl in order, shows no cue before its last word was written
    and none after the audio's end."""
    import json
    import shutil
    import subprocess

    from cli_runner import run_main

    from mmst.audio import load_audio
    from mmst.cli.longform_eval import main
    from mmst.corpora.long_talk import build_long_talk, write_long_talk

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed: the VAD needs speech")
    utts = []
    for i, text in enumerate(["The black cat sleeps on the warm chair.", "My brother reads a long book.",
                              "We walked to the market."]):
        subprocess.run(["espeak-ng", "-v", "en", "-s", "165", "-w", str(tmp_path / f"u{i}.wav"), text], check=True,
                       capture_output=True)
        utts.append(load_audio(str(tmp_path / f"u{i}.wav")))
    talk = build_long_talk(utts, {lang: tiny_system["refs"][lang][:3] for lang in ("de", "es")},
                           pause_s=(0.7, 0.9), lead_s=0.3, seed=3)
    p = write_long_talk(talk, tmp_path / "talk")
    out = tmp_path / "out"
    r = run_main(main, ["--model", tiny_system["ckpt"], "--data", tiny_system["data"], "--max-len-b", "5",
                        "--no-progress", "--audio", p["wav"], "--refs", f"de={p['de']},es={p['es']}",
                        "--segments", p["yaml"], "--out", out, "--subtitles", "vtt"])
    assert r.returncode == 0, r.stderr[-3000:]
    scores = json.loads((out / "scores.json").read_text())
    assert scores["config"]["segmentation"] == "silero-vad" and scores["n_vad_segments"] >= 1
    assert not [n for n in scores["notes"] if "subtitles" in n]
    audio_ms = talk.audio.size / 16.0
    for lang in ("de", "es"):
        hyp = [json.loads(ln) for ln in (out / lang / "hypothesis.jsonl").read_text().splitlines()]
        words = [_w(lang, h["text"], h["segment"], h["time_ms"]) for h in hyp]
        cues = [(c.start_in_seconds * 1000 + int(c.start[-3:]), c.end_in_seconds * 1000 + int(c.end[-3:]),
                 [html.unescape(ln) for ln in c.lines]) for c in webvtt.read(str(out / lang / "talk.vtt"))]
        assert words and cues
        _check_emission(cues, words, lang, audio_ms)
