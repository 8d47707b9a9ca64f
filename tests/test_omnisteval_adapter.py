"""mmst.evaluation.omnisteval_adapter: YAAL worked by hand, the degeneracy flag, SoftSegmenter and mWER on a
boundary word, and the adapter's numbers equal to the ``omnisteval`` command's on the same files to 1e-6
(mmst.evaluation.omnisteval_command; de, es, fr and ja at character level; a stream decoded by the suite's tiny
model)."""

from __future__ import annotations

import json

import pytest

from mmst.evaluation import omnisteval_command
from mmst.evaluation.instances import make_instance, read_instances, write_instances
from mmst.evaluation.omnisteval_adapter import (
    LONGFORM_KEYS,
    SHORTFORM_KEYS,
    Recording,
    cli_command,
    longform_scores,
    shortform_scores,
    write_longform_files,
)
from mmst.evaluation.resegment import RefSentence, TimedUnit, resegment


def _inst(i, words, delays, elapsed, ref, src_ms, unit="word"):
    return make_instance(i, words, delays, elapsed, ref, "x.wav", src_ms, unit)


# ----------------------------------------------------------------------------- YAAL and the diagnostics
def test_yaal_worked_by_hand():
    """Sentence 0: |X| = 2000 ms, reference "a b c d" (|Y*| = 4), delays 800, 1000, 1600, 2000 ms.
    gamma = max(|Y|, |Y*|) / |X| = 4 / 2000, so unit i is due at (i-1) / gamma = 0, 500, 1000, 1500 ms.
    YAAL counts the units written before the source ended (d < 2000: the first three):
    ((800 - 0) + (1000 - 500) + (1600 - 1000)) / 3 = 1900 / 3 = 633.33 ms
    (LAAL also counts the fourth, 2000 - 1500: 2400 / 4 = 600 ms).
    Sentence 1: |X| = 1000 ms, its first word at 1000 ms (= |X|): no unit before the end, left out.
    YAAL = 633.33. CA, elapsed 850, 1100, 1700, 2300: (850 + 600 + 700) / 3 = 716.67 (sentence 1's 1200 >= 1000).
    SWF = 100 * 3 / 6 = 50 % (three of six words before their source ended); EFSW = 100 * (2000 - 633.33) / 2000
    = 68.33 % (sentence 1 has no YAAL and is left out); DSPTV = 18.33: not degenerate (|DSPTV| <= 20).
    Hypotheses equal to the references: chrF 100."""
    ins = [_inst(0, "a b c d".split(), [800, 1000, 1600, 2000], [850, 1100, 1700, 2300], "a b c d", 2000.0),
           _inst(1, ["x", "y"], [1000, 1000], [1200, 1200], "x y", 1000.0)]
    s = shortform_scores(ins, "de")
    assert s["YAAL"] == pytest.approx(1900 / 3, abs=1e-9)
    assert s["YAAL_CA"] == pytest.approx(2150 / 3, abs=1e-9)
    assert s["SWF"] == pytest.approx(50.0) and s["EFSW"] == pytest.approx(100 * (2000 - 1900 / 3) / 2000)
    assert s["DSPTV"] == pytest.approx(100 * (2000 - 1900 / 3) / 2000 - 50.0)
    assert s["likely_degenerate"] is False
    assert s["chrF"] == pytest.approx(100.0)


def test_all_words_at_the_end_is_flagged_and_a_steady_schedule_is_not(tmp_path):
    """Degenerate: three sentences write all four words at the end (d = |X| = 2000 ms), one writes at
    500, 1000, 1500, 1900 ms. YAAL leaves the three out (their first word is not before the end) and gives
    the fourth (500 + 500 + 500 + 400) / 4 = 475 ms, so it looks simultaneous; but only 4 of 16 words came
    before their source ended: SWF = 25 %, EFSW = 100 * (2000 - 475) / 2000 = 76.25 %, DSPTV = 51.25 > 20:
    flagged, in scores.json and scores.md (and in the average over languages).
    Steady: every sentence writes at 100, 600, 1100, 1600 ms, 100 ms behind the pace (i-1) / gamma = 0, 500,
    1000, 1500: YAAL = 100, SWF = 100 %, EFSW = 100 * (2000 - 100) / 2000 = 95 %, DSPTV = -5: not flagged.
    Every sentence with all its words at the end: no YAAL (each sentence left out), so no DSPTV and no flag;
    SWF = 0 and LAAL = |X| = 2000 ms show it."""
    from mmst.evaluation.report import write_scores
    from mmst.evaluation.scorer import average_scores, score_instances

    end = [_inst(i, "a b c d".split(), [2000.0] * 4, [2000.0] * 4, "a b c d", 2000.0) for i in range(3)]
    burst = end + [_inst(3, "a b c d".split(), [500, 1000, 1500, 1900], [500, 1000, 1500, 1900], "a b c d", 2000.0)]
    m = score_instances(burst, "de").metrics
    assert m["YAAL"] == pytest.approx(475.0) and m["SWF"] == pytest.approx(25.0)
    assert m["EFSW"] == pytest.approx(76.25) and m["DSPTV"] == pytest.approx(51.25)
    assert m["likely_degenerate"] is True
    steady = [_inst(i, "a b c d".split(), [100, 600, 1100, 1600], [100, 600, 1100, 1600], "a b c d", 2000.0)
              for i in range(4)]
    m2 = score_instances(steady, "es").metrics
    assert m2["YAAL"] == pytest.approx(100.0) and m2["SWF"] == pytest.approx(100.0)
    assert m2["DSPTV"] == pytest.approx(-5.0) and m2["likely_degenerate"] is False
    every = score_instances(end, "fr").metrics  # every word at the end of every sentence: no YAAL, no flag
    assert "YAAL" not in every and "DSPTV" not in every and "likely_degenerate" not in every
    assert every["SWF"] == 0.0 and every["LAAL"] == pytest.approx(2000.0)
    avg = average_scores({"de": m, "es": m2})
    assert avg["likely_degenerate"] is True and avg["DSPTV"] == pytest.approx((51.25 - 5.0) / 2)
    obj = write_scores(tmp_path, {"de": m, "es": m2}, avg)
    assert obj["per_lang"]["de"]["likely_degenerate"] is True
    md = (tmp_path / "scores.md").read_text()
    assert "| de | 25.00 | 76.25 | 51.25 | **YES** |" in md and "| es | 100.00 | 95.00 | -5.00 | no |" in md


# ------------------------------------------------------------------ the same numbers as the omnisteval command
REFS = {
    "de": (["Die Katze schläft auf dem warmen Stuhl.", "Mein Bruder liest jeden Abend ein Buch.",
            "Wir gingen am Morgen zum Markt."], ["Sie kaufte frisches Brot.", "Der Lehrer öffnete das Fenster."]),
    "es": (["El gato negro duerme en la silla.", "Mi hermano lee un libro cada noche.",
            "Fuimos al mercado por la mañana."], ["Ella compró pan fresco.", "El profesor abrió la ventana."]),
    "fr": (["Le chat noir dort sur la chaise.", "Mon frère lit un livre chaque soir.",
            "Nous sommes allés au marché ce matin."], ["Elle a acheté du pain frais.",
                                                       "Le professeur a ouvert la fenêtre."]),
    "ja": (["黒い猫が椅子の上で寝ています。", "兄は毎晩本を読みます。", "私たちは朝市場に行きました。"],
           ["彼女は新しいパンを買いました。", "先生は窓を開けました。"]),
}
OFFSET_MS, STEP_MS, DUR_MS = 1000.0, 4000.0, 3500.0


def _sentence_units(ref: str, unit: str) -> list[str]:
    from mmst.evaluation.latency import split_units

    return split_units(ref, unit)


def _talk(lang: str, t: int, unit: str) -> tuple[list[TimedUnit], list[RefSentence], float]:
    """A recording's reference sentences (at 1 s, 5 s, 9 s, 3.5 s long) and a hypothesis of them in which the
    first sentence's last unit is written late, 100 ms into the second sentence, the third sentence's first
    word is lower-cased and the last sentence lacks its second unit; unit k of a sentence is written at
    offset + 300 + k * 2800 / n ms, the computation-aware time 40 + 10 k ms later."""
    refs = REFS[lang][t]
    sents = [RefSentence(r, OFFSET_MS + j * STEP_MS, DUR_MS) for j, r in enumerate(refs)]
    per = [_sentence_units(r, unit) for r in refs]
    out: list[TimedUnit] = []
    moved = per[0][-1]
    for j, us in enumerate(per):
        us = list(us[:-1]) if j == 0 else list(us)
        if j == 2 and unit == "word":
            us[0] = us[0].lower()
        if j == len(per) - 1:
            us = us[:1] + us[2:]
        o = sents[j].offset_ms
        if j == 1:
            out.append(TimedUnit(moved, o + 100.0, o + 150.0))
        for k, u in enumerate(us):
            tm = o + 300.0 + k * 2800.0 / len(us)
            out.append(TimedUnit(u, tm, tm + 40.0 + 10.0 * k))
    return out, sents, OFFSET_MS + len(refs) * STEP_MS + 500.0


def _shortform(lang: str, unit: str) -> list[dict]:
    """One instance per reference sentence: unit k at 300 + k * 400 ms, the last two at the end (|X| = 3500)."""
    out = []
    for i, ref in enumerate(REFS[lang][0] + REFS[lang][1]):
        us = _sentence_units(ref, unit)[: -1 if i % 2 else None]
        d = [min(300.0 + k * 400.0, DUR_MS) for k in range(len(us) - 2)] + [DUR_MS, DUR_MS]
        out.append(_inst(i, us, d, [x + 25.0 * (k + 1) for k, x in enumerate(d)], ref, DUR_MS, unit))
    return out


def _equal(adapter: dict, cli_dir, longform: bool, what: str) -> None:
    """Every metric of the adapter within 1e-6 of the command's unrounded score (and within the 4 decimals of its
    scores.tsv), none on one side only."""
    c = omnisteval_command.compare(adapter, cli_dir, longform)
    assert c["equal"] and not c["missing"], (what, c)
    keys = set((LONGFORM_KEYS if longform else SHORTFORM_KEYS).values())
    assert set(c["max_abs_diff"]) == {k for k in adapter if k in keys} and len(keys & set(adapter)) >= 6, what
    assert all(v <= 1e-6 for v in c["max_abs_diff"].values()), (what, c)


def test_equal_to_the_omnisteval_command(tmp_path):
    """For each language, segmented instances (instances.log + references.txt, ``omnisteval shortform``) and two
    recordings written as mmst-eval-longform writes them (``omnisteval longform`` with SoftSegmenter): the
    adapter's YAAL, chrF, SWF, EFSW, DSPTV, LongYAAL, LongAL, LongLAAL (CU and CA), BLEU and chrF equal the
    command's to 1e-6 (its score dict unrounded; and its scores.tsv to its 4 decimals), and its resegmented
    sentences equal the command's instances.resegmented.jsonl exactly. ja is scored at character level with ja-mecab BLEU, the others at
    word level with the Moses tokenizer of the language. The eight commands run side by side."""
    from mmst.evaluation.quality import bleu_tokenizer_for, latency_unit_for

    runs, expect = [], []
    for lang in ("de", "es", "fr", "ja"):
        unit, tok = latency_unit_for(lang), bleu_tokenizer_for(lang)[0]
        d = tmp_path / lang
        ins = _shortform(lang, unit)
        write_instances(d / "short" / "instances.log", ins)
        (d / "short" / "references.txt").write_text("".join(i["reference"] + "\n" for i in ins), encoding="utf-8")
        short = shortform_scores(read_instances(d / "short" / "instances.log"), lang, unit)
        runs.append(omnisteval_command.start(
            ["omnisteval", "shortform", "--hypothesis_file", str(d / "short" / "instances.log"),
             "--ref_sentences_file", str(d / "short" / "references.txt"), "--bleu_tokenizer", tok,
             "--char_level" if unit == "char" else "--word_level", "--output_folder", str(d / "cli_short")]))
        expect.append((f"{lang} shortform", short, d / "cli_short", None))
        recs = []
        for t in (0, 1):
            units, sents, length = _talk(lang, t, unit)
            recs.append(Recording(f"/data/{lang}/talk{t}.wav", units, length, sents))
        files = write_longform_files(d / "long", recs, unit)
        long = longform_scores(files, lang, unit)
        runs.append(omnisteval_command.start(cli_command(files, lang, unit, output_folder=d / "cli_long")))
        expect.append((f"{lang} longform", long, d / "cli_long", d / "long"))
    for p in runs:
        omnisteval_command.wait(p, timeout_s=120)
    for what, ours, cli_dir, long_dir in expect:
        _equal(ours, cli_dir, long_dir is not None, what)
        if long_dir is not None:
            mine = [json.loads(x) for x in (long_dir / "instances.resegmented.jsonl").read_text().splitlines()]
            theirs = [json.loads(x) for x in (cli_dir / "instances.resegmented.jsonl").read_text().splitlines()]
            assert mine == theirs, what
            assert len(mine) == 5 and all(m["prediction"] for m in mine), what
    de_long, cli_de = expect[1][1], expect[1][2]
    assert {"LongYAAL", "LongYAAL_CA", "LongAL", "LongLAAL", "SoftSeg_BLEU", "SoftSeg_chrF"} <= set(de_long)
    # the check fails on a difference of 2e-6 (the tolerance is 1e-6) and on a metric one side lacks
    off = omnisteval_command.compare({**de_long, "LongYAAL": de_long["LongYAAL"] + 2e-6}, cli_de)
    assert not off["equal"] and off["max_abs_diff"]["LongYAAL"] == pytest.approx(2e-6, abs=1e-9)
    short_of_one = omnisteval_command.compare({k: v for k, v in de_long.items() if k != "SoftSeg_chrF"}, cli_de)
    assert not short_of_one["equal"] and short_of_one["missing"] == ["SoftSeg_chrF"]
    with pytest.raises(ValueError, match="--output_folder"):
        omnisteval_command.start(cli_command(files, "ja", "char"))


# ------------------------------------------------------------------------- SoftSegmenter and mWER disagree
def test_softsegmenter_and_mwer_put_a_boundary_word_in_different_sentences(tmp_path):
    """References "Der Hund bellt." (1000-3000 ms) and "Laut schlafen Katzen." (4000-6500 ms); the system wrote
    "Der Hund bellt laut. Katzen schlafen." at 1500, 2000, 2500, 3500, 4800, 5600 ms.

    SoftSegmenter (Moses splits "laut." into "laut" "."; punctuation aligns only with punctuation) aligns the
    full stop after "laut" with the one ending the first reference, so "laut." stays in sentence 1:
    "Der Hund bellt laut." with delays 500, 1000, 1500, 2500 from its start. mWER, matching words exactly,
    finds "Laut" in the second reference and cuts before it: sentence 1 "Der Hund bellt" (500, 1000, 1500),
    sentence 2 "laut. Katzen schlafen." (-500, 800, 1600: "laut." was written before sentence 2 began).

    LongYAAL: sentence 1, |X| = 2000, |Y| = 4 > |Y*| = 3, gamma = 4 / 2000, due at 0, 500, 1000, 1500:
    (500 + 500 + 500 + 1000) / 4 = 625 (the word after the sentence's end counts: long form stops at the end
    of the recording's references, 5500 ms after the sentence's start); sentence 2, |X| = 2500, |Y*| = 3,
    gamma = 3 / 2500, due at 0, 833.3: (800 + 766.7) / 2 = 783.3; LongYAAL = 704.17 ms.
    StreamLAAL: sentence 1, gamma = 3 / 2000, due at 0, 666.7, 1333.3: (500 + 333.3 + 166.7) / 3 = 333.3;
    sentence 2, gamma = 3 / 2500, due at 0, 833.3, 1666.7: (-500 - 33.3 - 66.7) / 3 = -200; StreamLAAL = 66.67 ms."""
    from mmst.evaluation.resegment import stream_instances
    from mmst.evaluation.scorer import score_instances

    words = "Der Hund bellt laut. Katzen schlafen.".split()
    units = [TimedUnit(w, t, t + 20.0) for w, t in zip(words, [1500.0, 2000.0, 2500.0, 3500.0, 4800.0, 5600.0])]
    sents = [RefSentence("Der Hund bellt.", 1000.0, 2000.0), RefSentence("Laut schlafen Katzen.", 4000.0, 2500.0)]
    assert resegment(words, [s.text for s in sents]) == [[0, 1, 2], [3, 4, 5]]
    mwer = stream_instances(units, sents)
    assert [i["prediction"] for i in mwer] == ["Der Hund bellt", "laut. Katzen schlafen."]
    assert mwer[1]["delays"] == [-500.0, 800.0, 1600.0]
    assert score_instances(mwer, "de").metrics["LAAL"] == pytest.approx((1000 / 3 - 200) / 2, abs=1e-9)
    files = write_longform_files(tmp_path, [Recording("/x/talk.wav", units, 7000.0, sents)])
    s = longform_scores(files, "de")
    soft = [json.loads(x) for x in (tmp_path / "instances.resegmented.jsonl").read_text().splitlines()]
    assert [i["prediction"] for i in soft] == ["Der Hund bellt laut.", "Katzen schlafen."]
    assert soft[0]["emission_cu"] == [500.0, 1000.0, 1500.0, 2500.0]
    assert s["LongYAAL"] == pytest.approx((625.0 + (800 + 1600 - 2500 / 3) / 2) / 2, abs=1e-9)
    assert s["LongYAAL_CA"] == pytest.approx(s["LongYAAL"] + 20.0, abs=1e-9)


# ------------------------------------------------------------------ a stream decoded by the suite's tiny model
def test_longform_evaluation_of_a_tiny_model_stream_equals_the_command(tiny_system, tmp_path, capsys):
    """A talk of four of the tiny system's utterances with pauses, streamed by ``evaluate_talks`` (what
    ``mmst-eval-longform`` runs) with the gold segments: its words are poor, its delays and both
    resegmentations real. scores.json's LongYAAL, LongYAAL_CA, LongAL, LongLAAL, BLEU and chrF after
    SoftSegmenter equal (to 1e-6) the ``omnisteval longform`` command recorded in it, run on the files it wrote,
    for de and es; scores.md leads with LongYAAL, next to StreamLAAL. ``mmst-score --hypothesis-file`` on the written
    omnisteval.jsonl, the talk's yaml and references gives the same numbers both ways (mWER ones to 1e-3 ms: the
    file keeps times to 1 us)."""
    import shlex

    import torch

    from mmst.audio import load_audio
    from mmst.corpora.long_talk import build_long_talk, write_long_talk
    from mmst.evaluation.loading import load_system
    from mmst.evaluation.longform import evaluate_talks, talks_from_files
    from mmst.simultaneous.longform import LongFormTranslator, OracleSegmenter

    torch.set_num_threads(1)
    system = load_system(tiny_system["ckpt"], tiny_system["data"])
    n = 4
    utts = [load_audio(str(w)) for w in tiny_system["wavs"][:n]]
    talk = build_long_talk(utts, {lang: tiny_system["refs"][lang][:n] for lang in ("de", "es")},
                           pause_s=(0.4, 0.6), seed=1)
    p = write_long_talk(talk, tmp_path / "talk")
    talks = talks_from_files([p["wav"]], {"de": p["de"], "es": p["es"]}, p["yaml"])
    bounds = [(o, o + d) for o, d in zip(talk.offsets_s, talk.durations_s)]
    lf = LongFormTranslator(system.translator(2, max_len_b=8, min_len=3), vad=OracleSegmenter(bounds))
    obj = evaluate_talks(lf, talks, ["de", "es"], {"de": "word", "es": "word"}, tmp_path / "out", progress=False)
    runs = {}
    for lang in ("de", "es"):
        cmd = shlex.split(obj["per_lang"][lang]["info"]["omnisteval_command"])
        assert cmd[0] == "omnisteval" and "--word_level" in cmd and cmd[cmd.index("--lang") + 1] == lang
        runs[lang] = omnisteval_command.start(cmd + ["--output_folder", str(tmp_path / f"cli_{lang}")])
    for lang, proc in runs.items():
        omnisteval_command.wait(proc, timeout_s=120)
        m = obj["per_lang"][lang]
        assert {"LongYAAL", "LongYAAL_CA", "SoftSeg_BLEU", "SoftSeg_chrF", "StreamLAAL", "BLEU"} <= set(m), m
        _equal(m, tmp_path / f"cli_{lang}", True, lang)
        hyp = [json.loads(x) for x in (tmp_path / "out" / lang / "omnisteval.jsonl").read_text().splitlines()]
        assert len(hyp) == 1 and hyp[0]["source"] == "talk.wav" and len(hyp[0]["delays"]) == len(hyp[0]["prediction"].split()) > 0
        mine = (tmp_path / "out" / lang / "instances.resegmented.jsonl").read_text()
        assert mine == (tmp_path / f"cli_{lang}" / "instances.resegmented.jsonl").read_text()
    header = next(ln for ln in (tmp_path / "out" / "scores.md").read_text().splitlines() if ln.startswith("| lang"))
    assert header.split(" | ")[1] == "LongYAAL" and "StreamLAAL" in header
    from mmst.cli.score import main as score_main

    capsys.readouterr()
    assert score_main(["--hypothesis-file", str(tmp_path / "out" / "es" / "omnisteval.jsonl"), "--segments", str(p["yaml"]),
                       "--refs", str(p["es"]), "--tgt-langs", "es", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    m = obj["per_lang"]["es"]
    assert set(again) == {k for k in m if k.startswith(("Long", "SoftSeg", "Stream")) or k == "BLEU"}
    for k, v in again.items():
        assert v == pytest.approx(m[k], abs=1e-3 if k.startswith("Stream") else 1e-9), k


def test_a_bad_hypothesis_line_is_an_error_naming_file_and_line(tmp_path, capsys):
    from mmst.cli.score import main as score_main

    (tmp_path / "t.yaml").write_text("- {duration: 2.0, offset: 1.0, speaker_id: s, wav: t.wav}\n")
    (tmp_path / "t.de").write_text("Der Hund bellt.\n")
    h = tmp_path / "h.jsonl"
    h.write_text('{"source": "t.wav", "prediction": "Der Hund", "delays": [1500.0, 1600.0]}\n'
                 '{"source": "u.wav", "prediction": "a b", "delays": [1.0]}\n')
    argv = ["--hypothesis-file", str(h), "--segments", str(tmp_path / "t.yaml"), "--refs", str(tmp_path / "t.de"),
            "--tgt-langs", "de"]
    assert score_main(argv) == 1
    assert f"{h}:2: 2 words in prediction but 1 delays" in capsys.readouterr().err
    h.write_text('{"source": "u.wav", "prediction": "Der Hund", "delays": [1500.0, 1600.0]}\n')
    assert score_main(argv) == 1
    assert "no hypothesis for t; no segments for u" in capsys.readouterr().err
