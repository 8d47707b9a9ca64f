"""Score a long-form hypothesis file that already exists, both ways: SoftSegmenter + LongYAAL (OmniSTEval) and
mWER + StreamLAAL (mmst), from the files ``omnisteval longform`` reads.

``mmst-score --hypothesis-file`` calls :func:`score_longform_files`. Inputs: the hypothesis
(``omnisteval.jsonl``: one line per recording, ``source``, ``prediction``, ``delays``, ``elapsed``,
``source_length``, ms since the recording's start; :func:`mmst.evaluation.omnisteval_adapter.read_hypothesis_jsonl`),
a MuST-C yaml with each reference sentence's ``offset``/``duration`` (seconds) and ``wav`` (its recording), and the
reference sentences, one a line in the yaml's order.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mmst.evaluation.longform import read_segments_yaml
from mmst.evaluation.omnisteval_adapter import LongformFiles, longform_scores, read_hypothesis_jsonl
from mmst.evaluation.quality import latency_unit_for
from mmst.evaluation.resegment import RefSentence, stream_instances
from mmst.evaluation.scorer import score_instances


def score_longform_files(hypothesis: str | os.PathLike, segments: str | os.PathLike, references: str | os.PathLike,
                         lang: str | None, unit: str | None = None, tokenize: str | None = None) -> dict[str, Any]:
    """LongYAAL, LongYAAL_CA, LongAL(_CA), LongLAAL(_CA), SoftSeg_BLEU and SoftSeg_chrF after SoftSegmenter
    (:func:`mmst.evaluation.omnisteval_adapter.longform_scores`), and BLEU, StreamLAAL, StreamLAAL_CA, StreamAL,
    StreamAL_CA after mWER (:func:`mmst.evaluation.resegment.stream_instances`, as ``mmst-eval-longform``).

    Args:
        hypothesis: the hypothesis file (one JSON line per recording).
        segments: MuST-C yaml, one line per reference sentence.
        references: the reference sentences, one a line.
        lang: target language (BLEU tokenizer, Moses tokenizer, default unit).
        unit: ``word`` or ``char`` (default: char for ja/zh).
        tokenize: sacrebleu tokenizer (default per language).

    Returns:
        ``{metric: value}`` (latency in ms).

    Raises:
        ValueError: a bad line in any file (file and line named), yaml and references of different lengths, a
            recording of the yaml without a hypothesis or the reverse.
        mmst.evaluation.omnisteval_adapter.OmniSTEvalError: OmniSTEval missing, of another version, or
            rejecting the files.
    """
    unit = unit or latency_unit_for(lang)
    segs = read_segments_yaml(segments)
    refs = [ln.strip() for ln in Path(references).read_text(encoding="utf-8").splitlines()]
    if len(refs) != len(segs):
        raise ValueError(f"{segments}: {len(segs)} segments but {references} has {len(refs)} lines")
    hyps = {Path(name).stem: units for name, units in read_hypothesis_jsonl(hypothesis, unit).items()}
    talks: dict[str, list[RefSentence]] = {}
    for s, ref in zip(segs, refs):
        talks.setdefault(Path(s["wav"]).stem, []).append(
            RefSentence(ref, s["offset"] * 1000.0, s["duration"] * 1000.0))
    missing = [t for t in talks if t not in hyps]
    extra = [h for h in hyps if h not in talks]
    if missing or extra:
        raise ValueError(f"{hypothesis} and {segments} name different recordings: "
                         + "; ".join(x for x in (f"no hypothesis for {', '.join(missing)}" if missing else "",
                                                 f"no segments for {', '.join(extra)}" if extra else "") if x))
    instances: list[dict[str, Any]] = []
    for talk, sents in talks.items():
        instances += stream_instances(hyps[talk], sents, unit, talk, first_index=len(instances))
    m = score_instances(instances, lang, unit, computation_aware=True, tokenize=tokenize, omnisteval=False).metrics
    out = longform_scores(LongformFiles(Path(hypothesis), Path(segments), Path(references)), lang, unit, tokenize,
                          write_resegmented=False)
    out.pop("n_empty_sentences", None)
    if "BLEU" in m:
        out["BLEU"] = m["BLEU"]
    out.update({f"Stream{k}": m[k] for k in ("LAAL", "LAAL_CA", "AL", "AL_CA") if k in m})
    return out
