"""SentencePiece vocabularies: training with automatic sizing, and the :class:`Vocab` wrapper.

Special ids, identical in every model mmst trains (and identical to fairseq's ``Dictionary``, so the
``.txt`` dictionaries we write work in fairseq unchanged):

====  ===========  ==========================================================
id    piece        use
====  ===========  ==========================================================
0     ``<s>``      bos; start token of the separate-decoder models
1     ``<pad>``    padding (``pad_id`` of the losses)
2     ``</s>``     eos
3     ``<unk>``    unknown
4..   ``<lang:xx>``  joint model only: one user-defined symbol per target language, in
                   ``tgt_langs`` order (start token of the unified decoder)
then  pieces       unigram pieces
====  ===========  ==========================================================

Sizing on tiny corpora: SentencePiece refuses a vocabulary larger than the corpus supports
("Vocabulary size is too large") and a vocabulary smaller than the character set. We train with
``hard_vocab_limit=False`` (the requested size becomes an upper bound), raise the request to the
minimum the character set needs, and return/log the requested, minimum and actual sizes.

Languages written without spaces (ja, zh): SentencePiece treats a whole unspaced sentence as one
"word", so on a small corpus it learns pieces that cross word boundaries (a Japanese piece such as
``▁黒い子供は`` = adjective + noun + particle). Those pieces are combinatorial, rare and force a
simultaneous decoder to commit to several source words in one token. :func:`pretokenize` marks word
boundaries for training only (SentencePiece's ``pretokenization_delimiter``; MeCab + IPA dictionary for
ja, one word per Han character for zh), so no learned piece crosses a word; encoding still takes the
raw text.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from mmst.atomic import atomic_write_bytes, atomic_write_text

log = logging.getLogger(__name__)

#: Word-boundary mark of pretokenized training text (removed by SentencePiece; never in real text).
PRETOKENIZE_DELIMITER = "\u241f"
#: Languages written without spaces between words (pretokenized for vocabulary training).
NO_SPACE_LANGS = ("ja", "zh")

BOS_ID, PAD_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
BOS, PAD, EOS, UNK = "<s>", "<pad>", "</s>", "<unk>"
NUM_SPECIAL = 4


def lang_tag(lang: str) -> str:
    """The language tag symbol ``<lang:xx>`` (fairseq's ``prepend_tgt_lang_tag`` format)."""
    return f"<lang:{lang}>"


class Vocab:
    """A trained SentencePiece model with mmst's special ids.

    Picklable (the model bytes travel), so it can be used inside DataLoader workers.

    Attributes:
        path: model file path (``str``), or ``""`` when built from bytes.
        bos, pad, eos, unk: the special ids 0, 1, 2, 3.
    """

    bos, pad, eos, unk = BOS_ID, PAD_ID, EOS_ID, UNK_ID

    def __init__(self, model_proto: bytes, path: str = "") -> None:
        self.path = path
        self._proto = model_proto
        self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        for i, piece in ((BOS_ID, BOS), (PAD_ID, PAD), (EOS_ID, EOS), (UNK_ID, UNK)):
            if self._sp.id_to_piece(i) != piece:
                raise ValueError(f"{path or 'spm model'}: id {i} is {self._sp.id_to_piece(i)!r}, expected {piece!r}")
        self._lang_ids: dict[str, int] = {}
        for i in range(NUM_SPECIAL, len(self)):
            p = self._sp.id_to_piece(i)
            if not (p.startswith("<lang:") and p.endswith(">")):
                break
            self._lang_ids[p[6:-1]] = i

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Vocab:
        """Load a ``.model`` file. Raises ``FileNotFoundError`` / ``ValueError`` (wrong special ids)."""
        with open(os.fspath(path), "rb") as fh:
            return cls(fh.read(), os.fspath(path))

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "proto": self._proto}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["proto"], state["path"])  # type: ignore[misc]

    def __len__(self) -> int:
        """Vocabulary size (including specials and language tags)."""
        return int(self._sp.get_piece_size())

    @property
    def langs(self) -> list[str]:
        """Languages that have a ``<lang:xx>`` tag in this model (joint model), in id order."""
        return list(self._lang_ids)

    def encode(self, text: str) -> list[int]:
        """Text -> piece ids (no bos/eos added)."""
        return list(self._sp.encode(text, out_type=int))

    def encode_pieces(self, text: str) -> list[str]:
        """Text -> pieces (strings), for inspection."""
        return list(self._sp.encode(text, out_type=str))

    def decode(self, ids: Iterable[int]) -> str:
        """Piece ids -> text. bos/pad/eos and language tags are dropped; unk becomes `` ⁇ ``."""
        lang_ids = set(self._lang_ids.values())
        keep = [int(i) for i in ids if int(i) not in (BOS_ID, PAD_ID, EOS_ID) and int(i) not in lang_ids]
        return self._sp.decode(keep)

    lang_tag = staticmethod(lang_tag)

    def lang_tag_id(self, lang: str) -> int:
        """Id of ``<lang:xx>``. Raises ``KeyError`` if the model has no tag for ``lang``."""
        try:
            return self._lang_ids[lang]
        except KeyError:
            raise KeyError(f"{self.path or 'vocab'}: no language tag {lang_tag(lang)} (has {self.langs})") from None

    def id_to_piece(self, i: int) -> str:
        """Piece string of id ``i``."""
        return self._sp.id_to_piece(int(i))

    def piece_to_id(self, piece: str) -> int:
        """Id of ``piece`` (``unk`` if absent)."""
        return int(self._sp.piece_to_id(piece))


_MECAB: Any = None


def _mecab_words(text: str) -> list[str] | None:
    """Japanese words of ``text`` with MeCab + IPA dictionary (the tokenizer of sacrebleu's ja-mecab),
    or ``None`` when ``MeCab``/``ipadic`` are not importable."""
    global _MECAB
    if _MECAB is None:
        try:
            import ipadic
            import MeCab

            _MECAB = MeCab.Tagger(ipadic.MECAB_ARGS + " -Owakati")
        except (ImportError, RuntimeError):
            _MECAB = False
    if _MECAB is False:
        return None
    return _MECAB.parse(text).split()


def _is_han(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf"


def pretokenize(text: str, lang: str) -> str:
    """Mark word boundaries of ``text`` with :data:`PRETOKENIZE_DELIMITER` for SentencePiece training.

    ja: MeCab words (IPA dictionary) when importable (sacrebleu[ja] installs it), else one boundary
    between every two characters; zh: a boundary around every Han character. Spaces are kept (they
    are boundaries anyway). Other languages: ``text`` unchanged.
    """
    base = lang.split("-")[0].split("_")[0].lower()
    if base not in NO_SPACE_LANGS or not text:
        return text
    out = []
    for chunk in text.split():
        if base == "ja":
            words = _mecab_words(chunk) or list(chunk)
        else:
            words, cur = [], ""
            for ch in chunk:
                if _is_han(ch):
                    if cur:
                        words.append(cur)
                        cur = ""
                    words.append(ch)
                else:
                    cur += ch
            if cur:
                words.append(cur)
        out.append(PRETOKENIZE_DELIMITER.join(words))
    return " ".join(out)


def _character_coverage(chars: set[str]) -> float:
    """1.0 (every character gets a piece) unless the script is CJK-sized (>= 2000 distinct chars)."""
    return 0.9995 if len(chars) >= 2000 else 1.0


def train_sentencepiece(
    sentences: Sequence[str],
    model_path: str | os.PathLike[str],
    vocab_size: int,
    user_defined_symbols: Sequence[str] = (),
    model_type: str = "unigram",
    num_threads: int = 1,
    input_sentence_size: int = 2_000_000,
    write_fairseq_dict: bool = True,
    auto: bool = False,
    pretokenized: bool = False,
) -> dict[str, Any]:
    """Train a SentencePiece model with mmst's special ids; write it (and its fairseq dict) atomically.

    Args:
        sentences: training text, one sentence per item (empty items are ignored).
        model_path: destination ``.model``; the fairseq dictionary goes to the same stem + ``.txt``
            (``piece 1`` per line for every id >= 4, fairseq adds ids 0-3 itself).
        vocab_size: requested size (an upper bound: ``hard_vocab_limit=False``). Raised to the
            minimum the character set needs (specials + symbols + characters + 1).
        user_defined_symbols: e.g. ``["<lang:de>", "<lang:es>"]``; they get ids 4, 5, ...
        model_type: ``"unigram"`` (default) or ``"bpe"``/``"char"``.
        num_threads: SentencePiece trainer threads.
        input_sentence_size: sentences sampled for training on very large corpora.
        write_fairseq_dict: also write the ``.txt`` dictionary.
        auto: ``vocab_size`` was chosen automatically (raising it to the minimum is then logged at
            INFO instead of WARNING).
        pretokenized: ``sentences`` carry :data:`PRETOKENIZE_DELIMITER` word boundaries
            (:func:`pretokenize`); no piece will cross one.

    Returns:
        ``{"model": path, "requested": int, "minimum": int, "actual": int, "character_coverage": float,
        "num_sentences": int, "user_defined_symbols": [...]}``.

    Raises:
        ValueError: no non-empty sentence.
        RuntimeError: SentencePiece failed (message includes its error).
    """
    sents = [s for s in sentences if s.strip()]
    if not sents:
        raise ValueError(f"{model_path}: no non-empty training sentence for SentencePiece")
    chars = {c for s in sents for c in s if not c.isspace() and c != PRETOKENIZE_DELIMITER}
    coverage = _character_coverage(chars)
    n_chars_needed = len(chars) if coverage == 1.0 else min(len(chars), 2000)
    minimum = NUM_SPECIAL + len(user_defined_symbols) + n_chars_needed + 2  # +2: "▁" and slack
    chosen = max(int(vocab_size), minimum)
    if chosen != vocab_size:
        (log.info if auto else log.warning)("%s: vocab size %d is below the %d the character set needs; using %d",
                    model_path, vocab_size, minimum, chosen)
    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sents),
            model_writer=buf,
            vocab_size=chosen,
            hard_vocab_limit=False,
            model_type=model_type,
            character_coverage=coverage,
            bos_id=BOS_ID, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID,
            bos_piece=BOS, pad_piece=PAD, eos_piece=EOS, unk_piece=UNK,
            user_defined_symbols=list(user_defined_symbols),
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            num_threads=max(1, int(num_threads)),
            minloglevel=2,
            **({"pretokenization_delimiter": PRETOKENIZE_DELIMITER} if pretokenized else {}),
        )
    except RuntimeError as e:
        raise RuntimeError(f"{model_path}: SentencePiece training failed: {e}") from e
    proto = buf.getvalue()
    vocab = Vocab(proto, os.fspath(model_path))
    atomic_write_bytes(model_path, proto)
    if write_fairseq_dict:
        stem = os.path.splitext(os.fspath(model_path))[0]
        atomic_write_text(stem + ".txt", "".join(f"{vocab.id_to_piece(i)} 1\n" for i in range(NUM_SPECIAL, len(vocab))))
    info = {"model": os.fspath(model_path), "requested": int(vocab_size), "minimum": minimum,
            "actual": len(vocab), "character_coverage": coverage, "num_sentences": len(sents),
            "user_defined_symbols": list(user_defined_symbols)}
    log.info("%s: trained SentencePiece %s, requested %d, min %d, got %d pieces from %d sentences",
             model_path, model_type, vocab_size, minimum, len(vocab), len(sents))
    return info


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def vocab_fingerprint(path: str | Path, size: int, model_proto: bytes | None = None) -> dict[str, Any]:
    """``{"path", "size", "sha256"}`` of a SentencePiece model (stored in checkpoints); ``model_proto``: the
    file's bytes when already read (hashed instead of reading ``path`` again)."""
    sha = file_sha256(path) if model_proto is None else hashlib.sha256(model_proto).hexdigest()
    return {"path": str(path), "size": int(size), "sha256": sha}
