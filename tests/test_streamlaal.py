"""StreamLAAL on hand-computed cases: mWER resegmentation onto reference sentences, then LAAL per sentence
with delays from the sentence's start (:mod:`mmst.evaluation.resegment`). Each case writes the arithmetic
out; where FBK's scorer (simulstream 1.0, a test-only dependency) is installed, it must give the same.

LAAL(d, |X|, |Y*|) = 1/tau * sum_{i=1..tau} (d_i - (i-1) * |X| / max(|Y|, |Y*|)), tau = first i with
d_i >= |X| (or |Y|); d_1 > |X| gives d_1. StreamLAAL = mean over sentences that received a unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from mmst.evaluation.resegment import RefSentence, resegment, stream_instances, timed_units
from mmst.evaluation.scorer import score_instances


@dataclass(frozen=True)
class W:
    text: str
    time_ms: float
    time_ca_ms: float


def _words(pairs, lag_ms=None):
    """``[(text, time_ms), ...]`` -> words; ``time_ca_ms`` = time + lag_ms[i] (default: equal to time)."""
    return [W(t, ms, ms + (lag_ms[i] if lag_ms else 0.0)) for i, (t, ms) in enumerate(pairs)]


def _score(words, sents, unit="word", lang="de"):
    sentences = [RefSentence(t, o, d) for t, o, d in sents]
    inst = stream_instances(timed_units(words, unit), sentences, unit)
    res = score_instances(inst, lang, unit, computation_aware=True)
    return inst, res


def _simulstream(words, sents, unit):
    """simulstream 1.0's StreamLAAL (ideal, computation-aware) on the same units and times; skipped where
    simulstream is not installed (``make test`` installs it with ``--no-deps``: its scorer must import with
    mmst's own dependencies, so an ImportError inside it fails the test instead of skipping it)."""
    import importlib.util

    if importlib.util.find_spec("simulstream") is None:
        pytest.skip("simulstream not installed (pip install --no-deps simulstream==1.0.0)")
    from simulstream.metrics.readers import OutputWithDelays, ReferenceSentenceDefinition
    from simulstream.metrics.scorers.latency import LatencyScoringSample
    from simulstream.metrics.scorers.latency.stream_laal import StreamLaal

    units = timed_units(words, unit)
    text = ("" if unit == "char" else " ").join(u.text for u in units)
    hyp = OutputWithDelays(text, [u.time_ms for u in units], [u.time_ca_ms for u in units])
    refs = [ReferenceSentenceDefinition(t, o, d) for t, o, d in sents]
    s = StreamLaal(SimpleNamespace(latency_unit=unit)).score([LatencyScoringSample("talk", hyp, refs)])
    return s.ideal_latency, s.computational_aware_latency


SENTS_A = [("the cat sleeps", 0.0, 2000.0), ("a dog barks", 3000.0, 2000.0)]
WORDS_A = [("the", 1000.0), ("cat", 1500.0), ("sleeps", 3200.0), ("a", 3400.0), ("dog", 4000.0), ("barks", 5500.0)]


def test_words_written_during_the_next_sentence_count_for_their_own():
    """"sleeps" is written at 3200 ms, during sentence 2, but the alignment gives it to sentence 1.

    S1 (offset 0, |X| = 2000, |Y| = |Y*| = 3, step |X|/3 = 666.67): d = 1000, 1500, 3200; tau = 3 (3200 >= 2000)
        LAAL = (1000 + (1500 - 666.67) + (3200 - 1333.33)) / 3 = (5700 - 2000) / 3 = 1233.33
    S2 (offset 3000): d = 400, 1000, 2500; tau = 3
        LAAL = (400 + (1000 - 666.67) + (2500 - 1333.33)) / 3 = (3900 - 2000) / 3 = 633.33
    StreamLAAL = (1233.33 + 633.33) / 2 = 933.33
    """
    inst, res = _score(_words(WORDS_A), SENTS_A)
    assert [i["prediction"] for i in inst] == ["the cat sleeps", "a dog barks"]
    assert [i["delays"] for i in inst] == [[1000.0, 1500.0, 3200.0], [400.0, 1000.0, 2500.0]]
    assert res.metrics["LAAL"] == pytest.approx(2800.0 / 3)
    assert _simulstream(_words(WORDS_A), SENTS_A, "word")[0] == pytest.approx(2800.0 / 3)


def test_computation_aware_variant():
    """The same words out 100, 200, ..., 600 ms after their delays (a growing backlog).

    S1: elapsed = 1100, 1700, 3500; tau = 3: (1100 + (1700 - 666.67) + (3500 - 1333.33)) / 3 = 4300 / 3 = 1433.33
    S2: elapsed = 3800 - 3000, 4500 - 3000, 6100 - 3000 = 800, 1500, 3100; tau = 3:
        (800 + (1500 - 666.67) + (3100 - 1333.33)) / 3 = 3400 / 3 = 1133.33
    StreamLAAL_CA = (1433.33 + 1133.33) / 2 = 1283.33; StreamLAAL unchanged (933.33)
    """
    words = _words(WORDS_A, lag_ms=[100.0, 200.0, 300.0, 400.0, 500.0, 600.0])
    _, res = _score(words, SENTS_A)
    assert res.metrics["LAAL"] == pytest.approx(2800.0 / 3)
    assert res.metrics["LAAL_CA"] == pytest.approx(3850.0 / 3)
    ideal, ca = _simulstream(words, SENTS_A, "word")
    assert (ideal, ca) == (pytest.approx(2800.0 / 3), pytest.approx(3850.0 / 3))


def test_missing_sentence_is_left_out_of_the_mean():
    """Nothing of sentence 2 was written: the alignment leaves it empty, and it is left out of the latency
    mean (an empty hypothesis in BLEU).

    S1 (0, 2000): d = 800, 1200, 2200; tau = 3: (800 + (1200 - 666.67) + (2200 - 1333.33)) / 3 = 2200 / 3 = 733.33
    S3 (5000, 2000): d = 600, 1000, 2400; tau = 3: (600 + 333.33 + 1066.67) / 3 = 2000 / 3 = 666.67
    StreamLAAL = (733.33 + 666.67) / 2 = 700
    """
    sents = [("the cat sleeps", 0.0, 2000.0), ("my brother reads books", 2500.0, 2000.0), ("a dog barks", 5000.0, 2000.0)]
    words = _words([("the", 800.0), ("cat", 1200.0), ("sleeps", 2200.0), ("a", 5600.0), ("dog", 6000.0),
                    ("barks", 7400.0)])
    inst, res = _score(words, sents)
    assert [i["prediction"] for i in inst] == ["the cat sleeps", "", "a dog barks"]
    assert res.metrics["LAAL"] == pytest.approx(700.0)
    assert res.n_scored_latency == 2 and len(res.empty_hypotheses) == 1
    assert _simulstream(words, sents, "word")[0] == pytest.approx(700.0)


def test_negative_delay_and_first_delay_past_the_source():
    """"four" is written 50 ms before its sentence starts (d = -50, kept); "seven" after its sentence ended
    (d_1 = 600 > |X| = 500: LAAL = d_1).

    S1 (0, 1000, step 333.33): d = 500, 900, 1900; tau = 3: (500 + (900 - 333.33) + (1900 - 666.67)) / 3 = 2300 / 3
    S2 (2000, 1000): d = -50, 600, 1500; tau = 3: (-50 + (600 - 333.33) + (1500 - 666.67)) / 3 = 1050 / 3 = 350
    S3 (4000, 500): d = 600, 700; d_1 > 500: LAAL = 600
    StreamLAAL = (766.67 + 350 + 600) / 3 = 5150 / 9 = 572.22
    """
    sents = [("one two three", 0.0, 1000.0), ("four five six", 2000.0, 1000.0), ("seven eight", 4000.0, 500.0)]
    words = _words([("one", 500.0), ("two", 900.0), ("three", 1900.0), ("four", 1950.0), ("five", 2600.0),
                    ("six", 3500.0), ("seven", 4600.0), ("eight", 4700.0)])
    inst, res = _score(words, sents)
    assert inst[1]["delays"][0] == -50.0
    assert res.metrics["LAAL"] == pytest.approx(5150.0 / 9)
    assert _simulstream(words, sents, "word")[0] == pytest.approx(5150.0 / 9)


JA_SENTS = [("猫が寝る", 0.0, 1000.0), ("犬が吠える", 1500.0, 1000.0)]


def test_japanese_character_level():
    """Character units (|Y*| in characters).

    S1 (0, 1000, |Y| = |Y*| = 4, step 250): d = 300, 600, 900, 1200; tau = 4 (1200 >= 1000):
        (300 + (600 - 250) + (900 - 500) + (1200 - 750)) / 4 = 1500 / 4 = 375
    S2 (1500, 1000, |Y| = |Y*| = 5, step 200): d = 300, 500, 800, 1000, 1200; tau = 4 (1000 >= 1000):
        (300 + (500 - 200) + (800 - 400) + (1000 - 600)) / 4 = 1400 / 4 = 350
    StreamLAAL = (375 + 350) / 2 = 362.5
    """
    words = _words([("猫", 300.0), ("が", 600.0), ("寝", 900.0), ("る", 1200.0), ("犬", 1800.0), ("が", 2000.0),
                    ("吠", 2300.0), ("え", 2500.0), ("る", 2700.0)])
    inst, res = _score(words, JA_SENTS, "char", "ja")
    assert [i["prediction"] for i in inst] == ["猫が寝る", "犬が吠える"]
    assert res.metrics["LAAL"] == pytest.approx(362.5)
    assert _simulstream(words, JA_SENTS, "char")[0] == pytest.approx(362.5)


MIXED_SENTS = [("猫が寝る", 0.0, 2000.0), ("dog犬が吠える", 3000.0, 2000.0)]
MIXED_WORDS = [("猫", 500.0), ("が", 800.0), ("寝", 1500.0), ("る", 2100.0), ("the", 2600.0), ("dog", 3200.0),
               ("犬", 3600.0), ("が", 4000.0), ("吠", 4400.0), ("え", 4800.0), ("る", 5200.0)]


def test_mixed_script_japanese_aligns_latin_words_whole():
    """Latin words inside Japanese output are aligned as whole tokens (mweralign's CJSegmenter, as
    simulstream does), then counted in characters. Hypothesis 猫が寝るthedog犬が吠える; tokens
    猫|が|寝|る|thedog|犬|が|吠|え|る against 猫|が|寝|る and dog|犬|が|吠|え|る: "thedog" substitutes
    "dog" (1 error) in S2; giving it to S1 costs an insertion and a deletion (2). Character by character
    the aligner used to split it: "the" to S1, "dog" to S2 (3 errors either way, a tie).

    S1 (0, 2000, 4 chars, step 500): d = 500, 800, 1500, 2100; tau = 4:
        (500 + (800 - 500) + (1500 - 1000) + (2100 - 1500)) / 4 = 1900 / 4 = 475
    S2 (3000, 2000, |Y| = 11 chars (t h e d o g 犬 が 吠 え る), |Y*| = 8, step 2000/11 = 181.82):
        d = -400 x3, 200 x3, 600, 1000, 1400, 1800, 2200; tau = 11 (2200 >= 2000)
        sum d = -1200 + 600 + 7000 = 6400; sum (i-1) * 181.82 = 55 * 2000/11 = 10000
        LAAL = (6400 - 10000) / 11 = -327.27
    StreamLAAL = (475 - 327.27) / 2 = 73.86 (character by character: 435.71)
    """
    assert [len(g) for g in resegment(list("猫が寝るthedog犬が吠える"), [s[0] for s in MIXED_SENTS], "char")] == [4, 11]
    words = [W(c, ms, ms) for t, ms in MIXED_WORDS for c in t]
    inst, res = _score(words, MIXED_SENTS, "char", "ja")
    assert [i["prediction"] for i in inst] == ["猫が寝る", "thedog犬が吠える"]
    want = (475.0 - 3600.0 / 11) / 2
    assert res.metrics["LAAL"] == pytest.approx(want)
    assert _simulstream(words, MIXED_SENTS, "char")[0] == pytest.approx(want)


def test_mixed_script_long_stream_equals_simulstream():
    """A longer stream from a barely trained model (Latin words and repeats inside Japanese output,
    words drifting across sentences): mmst's StreamLAAL and StreamLAAL_CA equal simulstream's."""
    import random

    rng = random.Random(5)  # a seed where character-by-character alignment differs
    refs = ["今日は良い天気です", "私は東京に住んでいます", "PythonとRustが好きです", "駅まで歩きます", "会議は三時に始まります",
            "彼女はcoffeeを飲む", "明日は雨が降るでしょう", "本を読みました"]
    sents, t = [], 0.0
    for r in refs:
        d = 400.0 * len(r)
        sents.append((r, t, d))
        t += d + 300.0
    words, clock = [], 200.0
    for r, o, _ in sents:
        text = list(r)
        if rng.random() < 0.7:  # a Latin word inserted, or a character dropped
            text.insert(rng.randrange(len(text) + 1), rng.choice(["the", "is", "desu", "and", "Tokyo"]))
        if rng.random() < 0.4:
            del text[rng.randrange(len(text))]
        for piece in text:
            clock = max(clock + rng.randint(50, 500), o - 300.0)  # whole ms: exact in both scorers
            words.extend(W(c, clock, clock + rng.randint(10, 300)) for c in piece)
    _, res = _score(words, sents, "char", "ja")
    ideal, ca = _simulstream(words, sents, "char")
    assert res.metrics["LAAL"] == pytest.approx(ideal, abs=1e-6)
    assert res.metrics["LAAL_CA"] == pytest.approx(ca, abs=1e-6)
