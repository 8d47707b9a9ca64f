"""Score SimulEval-style instances: BLEU (sacrebleu) + every latency metric, plain and computation-aware.

:func:`score_instances` is what ``eval/score.py`` and ``eval/simultaneous_eval.py`` call.  Its result
maps metric names to values: ``BLEU``, ``length_ratio`` (:func:`length_ratio`), ``AL``, ``LAAL``, ``AP``,
``DAL``, ``ATD``, ``StartOffset``, ``EndOffset`` and the latency ones with ``_CA`` (see
:mod:`mmst.evaluation.latency` for the formulas and :mod:`mmst.evaluation.quality` for BLEU), and
OmniSTEval's ``YAAL``, ``YAAL_CA``, ``chrF``, ``SWF``, ``EFSW``, ``DSPTV`` and ``likely_degenerate``
(:mod:`mmst.evaluation.omnisteval_adapter`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmst.evaluation.latency import (
    LATENCY_METRICS,
    LatencyError,
    corpus_latency,
    reference_length,
    split_units,
)
from mmst.evaluation.omnisteval_adapter import OmniSTEvalError, shortform_scores
from mmst.evaluation.quality import QualityError, corpus_bleu, latency_unit_for

logger = logging.getLogger("mmst.evaluation.scorer")


class ScoringError(ValueError):
    """Raised when a set of instances cannot be scored at all (e.g. every hypothesis is empty)."""


@dataclass
class ScoreResult:
    """Scores of one instance set.

    Attributes:
        metrics: ``{"BLEU": .., "AL": .., "AL_CA": .., ...}`` (BLEU absent when no reference exists).
        n_instances: instances read.
        n_scored_latency: instances with a non-empty hypothesis that entered the latency averages.
        empty_hypotheses: indices of instances with an empty hypothesis (in BLEU as "", out of latency).
        missing_references: indices of instances without a reference (out of BLEU; latency uses |Y|).
        bleu_signature: sacrebleu signature, ``bleu_tokenizer``, ``bleu_note`` (MeCab fallback note).
        latency_unit: ``word`` or ``char``.
    """

    metrics: dict[str, float]
    n_instances: int
    n_scored_latency: int
    empty_hypotheses: list[int] = field(default_factory=list)
    missing_references: list[int] = field(default_factory=list)
    bleu_signature: str | None = None
    bleu_tokenizer: str | None = None
    bleu_note: str | None = None
    latency_unit: str = "word"

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (metrics flattened at the top level plus an ``info`` block)."""
        return {
            **self.metrics,
            "info": {
                "n_instances": self.n_instances,
                "n_scored_latency": self.n_scored_latency,
                "empty_hypotheses": self.empty_hypotheses,
                "missing_references": self.missing_references,
                "bleu_signature": self.bleu_signature,
                "bleu_tokenizer": self.bleu_tokenizer,
                "bleu_note": self.bleu_note,
                "latency_unit": self.latency_unit,
            },
        }


def length_ratio(instances: Sequence[Mapping[str, Any]], unit: str = "word", *,
                 simuleval_compat: bool = False) -> float | None:
    """Corpus length ratio ``sum |Y| / sum |Y*|`` in latency units (words, or characters for ja/zh), the
    lengths AL and LAAL use; empty hypotheses count 0. None when no instance has a reference.

    Over-generation (ratio well above 1) lowers AL, which divides by ``|Y*|``; LAAL divides by
    ``max(|Y|, |Y*|)`` (Papi et al., 2022), so read a ratio outside [0.7, 1.4] as a warning on AL.
    """
    hyp = ref = 0
    for ins in instances:
        if ins.get("reference") is None:
            continue
        hyp += len(split_units(ins.get("prediction") or "", unit))
        ref += reference_length(ins["reference"], unit, simuleval_compat=simuleval_compat)
    return hyp / ref if ref else None


def score_instances(
    instances: Sequence[Mapping[str, Any]],
    tgt_lang: str | None = None,
    latency_unit: str | None = None,
    *,
    computation_aware: bool = True,
    use_ref_len: bool = True,
    tokenize: str | None = None,
    input_type: str = "speech",
    metrics: Sequence[str] = LATENCY_METRICS,
    simuleval_compat: bool = False,
    omnisteval: bool = True,
) -> ScoreResult:
    """BLEU and latency of SimulEval-1.1 instances, and OmniSTEval's YAAL, chrF and degeneracy diagnostics.

    Args:
        instances: instance dicts (``prediction``, ``delays``, ``elapsed``, ``reference``, ``source_length``).
        tgt_lang: target language; chooses the BLEU tokenizer and default latency unit.
        latency_unit: ``word``/``char``; default from ``tgt_lang`` (char for zh/ja).
        computation_aware: also report ``<metric>_CA`` from ``elapsed``.
        use_ref_len: ``False`` = SimulEval ``--no-use-ref-len``.
        tokenize: explicit sacrebleu tokenizer (overrides the per-language choice).
        input_type: ``speech`` (ms) or ``text``.
        metrics: latency metrics.
        simuleval_compat: count reference words as SimulEval 1.1.4 does (``split(" ")``; see
            :func:`mmst.evaluation.latency.reference_length`).
        omnisteval: also report OmniSTEval's ``YAAL``, ``YAAL_CA``, ``chrF``, ``SWF``, ``EFSW``, ``DSPTV`` and
            ``likely_degenerate`` (:func:`mmst.evaluation.omnisteval_adapter.shortform_scores`; YAAL counts
            reference words as OmniSTEval does, ``split(" ")``); left out, with a warning, when OmniSTEval
            is unavailable.

    Returns:
        :class:`ScoreResult`.

    Raises:
        ScoringError: no instances, or every hypothesis is empty.
    """
    if not instances:
        raise ScoringError("no instances to score")
    unit = latency_unit or latency_unit_for(tgt_lang)
    empty = [int(ins.get("index", i)) for i, ins in enumerate(instances) if not (ins.get("delays") or [])]
    if len(empty) == len(instances):
        raise ScoringError(
            f"every hypothesis is empty ({len(instances)} instances): nothing to score. "
            "Check the model/checkpoint and the decoding options (e.g. --max-len-a/--max-len-b)."
        )
    if empty:
        logger.warning(
            "%d of %d instances have an empty hypothesis (indices %s%s): counted as '' in BLEU, "
            "left out of latency as SimulEval does",
            len(empty),
            len(instances),
            ", ".join(map(str, empty[:10])),
            ", ..." if len(empty) > 10 else "",
        )
    missing = [int(ins.get("index", i)) for i, ins in enumerate(instances) if ins.get("reference") is None]
    result: dict[str, float] = {}
    sig = tok = note = None
    try:
        bleu = corpus_bleu(
            [ins.get("prediction") for ins in instances],
            [ins.get("reference") for ins in instances],
            lang=tgt_lang,
            tokenize=tokenize,
        )
        result["BLEU"] = bleu.score
        sig, tok, note = bleu.signature, bleu.tokenizer, bleu.note
    except QualityError as e:
        logger.warning("BLEU not computed: %s", e)
    try:
        lat = corpus_latency(
            instances,
            unit,
            computation_aware=computation_aware,
            use_ref_len=use_ref_len,
            input_type=input_type,
            metrics=metrics,
            simuleval_compat=simuleval_compat,
        )
    except LatencyError as e:
        raise ScoringError(str(e)) from None
    ratio = length_ratio(instances, unit, simuleval_compat=simuleval_compat)
    if ratio is not None:
        result["length_ratio"] = ratio
    result.update(lat.scores)
    if omnisteval:
        try:
            result.update(shortform_scores(instances, tgt_lang, unit, tok or tokenize))
        except OmniSTEvalError as e:
            logger.warning("YAAL, chrF and the degeneracy diagnostics not computed: %s", e)
    return ScoreResult(
        metrics=result,
        n_instances=len(instances),
        n_scored_latency=lat.n_scored,
        empty_hypotheses=empty,
        missing_references=missing,
        bleu_signature=sig,
        bleu_tokenizer=tok,
        bleu_note=note,
        latency_unit=unit,
    )


def average_scores(per_lang: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Unweighted mean over languages of each metric present in every language's scores; a flag (bool, such as
    ``likely_degenerate``) becomes True when it is True for any language."""
    langs = list(per_lang)
    if not langs:
        return {}
    keys = [k for k in per_lang[langs[0]] if all(k in per_lang[lang] for lang in langs)]
    out = {}
    for k in keys:
        vals = [per_lang[lang][k] for lang in langs]
        if all(isinstance(v, bool) for v in vals):
            out[k] = any(vals)
        elif all(isinstance(v, int | float) for v in vals):
            out[k] = float(sum(vals) / len(vals))
    return out
