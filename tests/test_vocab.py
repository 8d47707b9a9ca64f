"""Tests of mmst.data.vocab: special ids, language tags, automatic sizing, fairseq dict, pickling."""

from __future__ import annotations

import pickle

import pytest

from mmst.corpora.multiway import auto_vocab_size
from mmst.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab, lang_tag, train_sentencepiece

SENTS = [
    "the small cat sees the big dog", "a red bird likes the blue fish", "the dog sees a small bird",
    "der kleine hund sieht den grossen vogel", "el gato rojo ve el perro azul", "un pez azul",
] * 5


def test_special_ids_and_lang_tags(tmp_path) -> None:
    info = train_sentencepiece(SENTS, tmp_path / "spm_joint.model", 60, [lang_tag("de"), lang_tag("es")])
    v = Vocab.load(tmp_path / "spm_joint.model")
    assert [v.id_to_piece(i) for i in range(4)] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert (v.bos, v.pad, v.eos, v.unk) == (BOS_ID, PAD_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert v.lang_tag_id("de") == 4 and v.lang_tag_id("es") == 5 and v.langs == ["de", "es"]
    assert v.lang_tag("de") == "<lang:de>"
    with pytest.raises(KeyError, match="lang:fr"):
        v.lang_tag_id("fr")
    ids = v.encode("the small cat")
    assert all(i > 5 for i in ids)
    assert v.decode([v.lang_tag_id("de")] + ids + [EOS_ID, PAD_ID]) == "the small cat"
    assert len(v) == info["actual"]
    # fairseq dictionary: every piece from id 4 on, "piece 1"
    lines = (tmp_path / "spm_joint.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(v) - 4 and lines[0] == "<lang:de> 1" and lines[1] == "<lang:es> 1"
    v2 = pickle.loads(pickle.dumps(v))
    assert v2.encode("the small cat") == ids and v2.lang_tag_id("es") == 5


def test_sizing_on_tiny_corpus(tmp_path) -> None:
    # far too large: no error (hard_vocab_limit=False), the corpus decides, the report says so
    info = train_sentencepiece(SENTS, tmp_path / "a.model", 8000)
    assert info["requested"] == 8000 and info["actual"] < 8000
    # too small for the character set: raised to the minimum, every character still representable
    info = train_sentencepiece(SENTS, tmp_path / "b.model", 5)
    assert info["actual"] >= info["minimum"] > 5
    v = Vocab.load(tmp_path / "b.model")
    assert UNK_ID not in v.encode("der kleine hund")
    # automatic choice: the word types, at least 64, at most the cap
    assert auto_vocab_size(SENTS, 10000) == 64
    big = [f"w{i} x{i}" for i in range(3000)]
    assert auto_vocab_size(big, 10000) == 6000 and auto_vocab_size(big, 4000) == 4000
    with pytest.raises(ValueError):
        train_sentencepiece(["", "  "], tmp_path / "c.model", 10)


def test_rejects_model_with_other_special_ids(tmp_path) -> None:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(sentence_iterator=iter(SENTS), model_prefix=str(tmp_path / "plain"),
                                   vocab_size=40, minloglevel=2)  # default ids: unk=0, bos=1, eos=2
    with pytest.raises(ValueError, match="expected '<s>'"):
        Vocab.load(tmp_path / "plain.model")


JA = ["黒い子供は小さい本を見つけます。", "学生はドアを見つけます。", "黒い犬は本を見ます。", "学生は小さい犬を見ます。",
      "子供は黒いドアを買います。", "犬は学生を見つけます。"] * 20


def test_pretokenize_marks_word_boundaries() -> None:
    from mmst.data.vocab import PRETOKENIZE_DELIMITER as D
    from mmst.data.vocab import pretokenize

    assert pretokenize("the small cat", "de") == "the small cat"  # spaced languages: unchanged
    ja = pretokenize("黒い子供は本を見ます。", "ja")
    assert ja.replace(D, "") == "黒い子供は本を見ます。"  # nothing but boundaries added
    words = ja.split(D)
    assert "黒い" in words and "本" in words and len(words) >= 6  # MeCab words (or characters without MeCab)
    assert pretokenize("我爱abc 你", "zh") == f"我{D}爱{D}abc 你"


def test_pretokenized_ja_pieces_never_span_words(tmp_path) -> None:
    from mmst.data.vocab import pretokenize

    raw = train_sentencepiece(JA, tmp_path / "raw.model", 60)
    pre = train_sentencepiece([pretokenize(s, "ja") for s in JA], tmp_path / "pre.model", 60, pretokenized=True)
    v_raw, v_pre = Vocab.load(tmp_path / "raw.model"), Vocab.load(tmp_path / "pre.model")
    pieces = lambda v: {v.id_to_piece(i).lstrip("▁") for i in range(4, len(v))}  # noqa: E731
    # unspaced text: SentencePiece learns pieces across word boundaries (e.g. noun + particle "子供は")
    assert any(p.endswith(("は", "を")) and len(p) > 1 for p in pieces(v_raw))
    # pretokenized: a particle is never glued to its noun, and the raw text still round-trips
    assert not any(p.endswith(("は", "を")) and len(p) > 1 for p in pieces(v_pre))
    assert raw["actual"] > 0 and pre["actual"] == len(v_pre) and v_pre.decode(v_pre.encode(JA[0])) == JA[0]
