"""BLEU tokenizer choice per target language, sacrebleu signature, missing references."""

from __future__ import annotations

import pytest

from mmst.evaluation import quality
from mmst.evaluation.quality import (
    QualityError,
    bleu_tokenizer_for,
    corpus_bleu,
    latency_unit_for,
    latency_units,
)


@pytest.mark.parametrize(
    "lang,tok", [("de", "13a"), ("es", "13a"), ("fr", "13a"), ("en", "13a"), ("zh", "zh"), ("zh-CN", "zh"), (None, "13a")]
)
def test_tokenizer_choice(lang, tok):
    assert bleu_tokenizer_for(lang) == (tok, None)


def test_japanese_uses_mecab_when_available():
    quality.mecab_available.cache_clear()
    if quality.mecab_available():
        assert bleu_tokenizer_for("ja") == ("ja-mecab", None)
        res = corpus_bleu(["今日は良い天気です"], ["今日はいい天気です"], lang="ja")
        assert "tok:ja-mecab" in res.signature


def test_japanese_falls_back_to_char_with_note(monkeypatch):
    monkeypatch.setattr(quality, "mecab_available", lambda: False)
    tok, note = bleu_tokenizer_for("ja")
    assert tok == "char" and "MeCab" in note
    res = corpus_bleu(["今日は良い天気です"], ["今日はいい天気です"], lang="ja")
    assert res.tokenizer == "char" and res.note and "tok:char" in res.signature


@pytest.mark.parametrize("lang,unit", [("de", "word"), ("es", "word"), ("zh", "char"), ("ja", "char")])
def test_latency_unit(lang, unit):
    assert latency_unit_for(lang) == unit


def test_latency_units_auto_is_per_language_and_a_unit_overrides_all():
    assert latency_units(["de", "ja"]) == {"de": "word", "ja": "char"}
    assert latency_units(["de", "ja"], "word") == {"de": "word", "ja": "word"}
    assert latency_units(["de", "ja"], "char") == {"de": "char", "ja": "char"}


def test_bleu_matches_sacrebleu_and_signature():
    import sacrebleu

    hyps = ["das ist ein kleines Haus", "der Hund bellt laut"]
    refs = ["das ist ein kleines Haus", "der Hund bellt sehr laut"]
    res = corpus_bleu(hyps, refs, lang="de")
    assert res.score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert "tok:13a" in res.signature and res.n_sentences == 2


def test_chinese_bleu_uses_zh_tokenizer():
    res = corpus_bleu(["我们今天去公园散步"], ["我们今天去公园散步了"], lang="zh")
    assert "tok:zh" in res.signature and res.score > 50


def test_missing_references():
    res = corpus_bleu(["a b c d", "x"], ["a b c d", None])
    assert res.n_sentences == 1 and res.score == pytest.approx(100.0)
    with pytest.raises(QualityError, match="no sentence has a reference"):
        corpus_bleu(["a"], [None])
    with pytest.raises(QualityError):
        corpus_bleu(["a", "b"], ["a"])
