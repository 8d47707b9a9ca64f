"""Translation quality: sacrebleu corpus BLEU (Papineni et al., 2002; Post, 2018) with its signature.

The tokenizer follows the target language:

- ``zh`` -> sacrebleu ``zh`` (Chinese characters split, other text 13a);
- ``ja`` -> ``ja-mecab`` (MeCab + IPA dictionary, sacrebleu[ja]); when MeCab is not importable,
  ``char`` is used and a note says so (scores are then not comparable with ja-mecab scores);
- anything else -> ``13a`` (the WMT standard, sacrebleu's default).

The latency unit follows too: characters for zh and ja (no spaces between words), words otherwise;
``--eval-latency-unit`` overrides it.

BLEU is computed over every instance, an empty hypothesis counting as ``""`` (as SimulEval's
``SacreBLEUScorer`` does); instances without a reference are left out of BLEU, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

logger = logging.getLogger("mmst.evaluation.quality")

#: Languages written without spaces between words: char latency unit, special BLEU tokenizers.
NO_SPACE_LANGS = frozenset({"zh", "ja"})


class QualityError(ValueError):
    """Raised when BLEU cannot be computed (no references, length mismatch)."""


@lru_cache(maxsize=1)
def mecab_available() -> bool:
    """True when sacrebleu's ``ja-mecab`` tokenizer can be built (``MeCab`` and ``ipadic`` importable)."""
    try:
        from sacrebleu.tokenizers.tokenizer_ja_mecab import TokenizerJaMecab

        TokenizerJaMecab()
        return True
    except Exception:  # ImportError, RuntimeError from MeCab without a dictionary, ...
        return False


def _base_lang(lang: str | None) -> str:
    return (lang or "").lower().replace("_", "-").split("-")[0]


def bleu_tokenizer_for(lang: str | None) -> tuple[str, str | None]:
    """Choose the sacrebleu tokenizer for a target language.

    Args:
        lang: ISO 639-1 code (``de``, ``zh``, ``ja``, ``zh-CN``...), or ``None``.

    Returns:
        ``(tokenizer, note)``: ``("zh", None)``, ``("ja-mecab", None)``, ``("char", note)`` when MeCab
        is unavailable for Japanese, else ``("13a", None)``.
    """
    base = _base_lang(lang)
    if base == "zh":
        return "zh", None
    if base == "ja":
        if mecab_available():
            return "ja-mecab", None
        return "char", (
            "MeCab (mecab-python3 + ipadic, i.e. sacrebleu[ja]) is unavailable: Japanese BLEU uses the "
            "'char' tokenizer and is not comparable with ja-mecab scores"
        )
    return "13a", None


def latency_unit_for(lang: str | None) -> str:
    """Default latency unit for a target language: ``char`` for zh/ja, ``word`` otherwise."""
    return "char" if _base_lang(lang) in NO_SPACE_LANGS else "word"


def latency_units(langs: Iterable[str], unit: str = "auto") -> dict[str, str]:
    """``{lang: latency unit}``: ``unit`` (``word`` or ``char``) for every language, or with ``"auto"``
    each language's :func:`latency_unit_for` (``--eval-latency-unit`` of the evaluation scripts)."""
    return {lang: latency_unit_for(lang) if unit == "auto" else unit for lang in langs}


@dataclass
class BleuResult:
    """Corpus BLEU: ``score`` (0-100), sacrebleu ``signature`` string, ``tokenizer`` used, optional
    ``note`` (e.g. the MeCab fallback), ``n_sentences`` scored, and sacrebleu's ``verbose`` line."""

    score: float
    signature: str
    tokenizer: str
    note: str | None
    n_sentences: int
    verbose: str


def corpus_bleu(
    hypotheses: Sequence[str | None],
    references: Sequence[str | None],
    lang: str | None = None,
    tokenize: str | None = None,
) -> BleuResult:
    """Corpus BLEU with sacrebleu, one reference per sentence.

    Args:
        hypotheses: hypothesis strings (``None`` counts as empty).
        references: reference strings; pairs whose reference is ``None`` are left out (warning).
        lang: target language, chooses the tokenizer (see :func:`bleu_tokenizer_for`).
        tokenize: explicit sacrebleu tokenizer, overrides ``lang``.

    Returns:
        :class:`BleuResult`.

    Raises:
        QualityError: lengths differ, or no sentence has a reference.
    """
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise QualityError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    pairs = [(h or "", r) for h, r in zip(hypotheses, references) if r is not None]
    n_missing = len(references) - len(pairs)
    if n_missing:
        logger.warning("%d of %d sentences have no reference; left out of BLEU", n_missing, len(references))
    if not pairs:
        raise QualityError("no sentence has a reference; BLEU cannot be computed")
    note = None
    if tokenize is None:
        tokenize, note = bleu_tokenizer_for(lang)
        if note:
            logger.warning(note)
    bleu = BLEU(tokenize=tokenize)
    res = bleu.corpus_score([h for h, _ in pairs], [[r for _, r in pairs]])
    return BleuResult(
        score=float(res.score),
        signature=str(bleu.get_signature()),
        tokenizer=tokenize,
        note=note,
        n_sentences=len(pairs),
        verbose=str(res),
    )
