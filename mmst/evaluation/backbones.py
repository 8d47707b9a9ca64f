"""Speech-encoder backbones compared at equal training updates (not equal compute): an ASR-pretrained encoder
(a tiny wav2vec 2.0-architecture encoder trained here on English ASR of the same synthetic train split, then
saved as a Hugging Face folder), the same encoder from scratch, and mmst's own ``xs`` encoder with its ASR
pretraining (``recipes/synthetic/run_backbones.sh``). It measures an ASR-then-ST curriculum against ST alone
on a toy corpus; it says nothing about a real pretrained model (wav2vec 2.0, HuBERT, WavLM, Whisper).

Input: evaluation directories of ``mmst-eval`` laid out as ``EVALS/<split>/<system>/seed<S>/`` for
``tst-COMMON`` and ``tst-unseen`` (:func:`mmst.evaluation.unseen_gap.collect`), systems
:data:`PRETRAINED`, :data:`SCRATCH` and :data:`XS_ASR`. Per system and test set, BLEU at one wait-k is
averaged over the languages, then over the seeds (:func:`mmst.evaluation.unseen_gap.unseen_gap_report`
gives the rows); a system's ``bleu`` is the mean of its two test sets. The summary (first key) is::

    pretrained_minus_scratch_bleu_k3 = bleu(hf_pretrained) - bleu(hf_scratch)
    hf_minus_xs_asr_bleu_k3          = bleu(hf_pretrained) - bleu(xs_asr)

(``k3`` is the wait-k of the comparison), ``goal_met`` = the first is positive (the pretrained folder
transfers what it holds), and ``complete`` (False while an expected evaluation is missing).

Each system also gets ``seen_latency``: its ``LAAL``, ``AL_CA`` and ``LAAL_CA`` on ``tst-COMMON`` (ms; the
computation-aware ones count the encoder's compute, which a bidirectional encoder repeats over the whole
input at every chunk), averaged like AL, for each metric that every language's evaluation reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mmst.evaluation.compare import CompareError, mean_std
from mmst.evaluation.unseen_gap import SEEN, UNSEEN, unseen_gap_report
from mmst.provenance import run_record

PRETRAINED, SCRATCH, XS_ASR = "hf_pretrained", "hf_scratch", "xs_asr"
SYSTEMS = (PRETRAINED, SCRATCH, XS_ASR)
#: latencies reported beside AL on tst-COMMON (ms), when the evaluations have them
LATENCIES = ("LAAL", "AL_CA", "LAAL_CA")

#: The source paths the comparison exercises (the recipe, its configs, the encoders, training, export of the
#: pretrained folder, evaluation, this report); recorded with their digests in ``provenance.depends_on``.
DEPENDS_ON = ("recipes/synthetic/run_backbones.sh", "recipes/synthetic/conf/", "recipes/lib/",
              "mmst/cli/hf_encoder.py", "mmst/cli/make_asr_view.py", "mmst/cli/simultaneous_eval.py",
              "mmst/cli/backbones.py", "mmst/corpora/asr_view.py", "mmst/data/", "mmst/models/", "mmst/losses.py",
              "mmst/training/", "mmst/simultaneous/", "mmst/evaluation/")


def backbones_report(scores: dict[str, Any], expected_seeds: Sequence[int] = (), k: str = "k3") -> dict[str, Any]:
    """The report (module docstring) from :func:`mmst.evaluation.unseen_gap.collect`'s scores of :data:`SYSTEMS`.

    Raises:
        CompareError: a system without an evaluation on both test sets.
    """
    rows = unseen_gap_report(scores, baseline=SCRATCH, expected_seeds=expected_seeds, k=k)
    bleu: dict[str, float] = {}
    for name in SYSTEMS:
        row = rows["systems"].get(name)
        if row is None or not (row["seen_bleu"]["n"] and row["unseen_bleu"]["n"]):
            raise CompareError(f"system {name!r} has no {k} evaluation on both {SEEN} and {UNSEEN}")
        bleu[name] = (row["seen_bleu"]["mean"] + row["unseen_bleu"]["mean"]) / 2
        row["bleu"] = bleu[name]
        row["seen_latency"] = _latencies(scores[name].get(SEEN, {}), rows["langs"])
    d = bleu[PRETRAINED] - bleu[SCRATCH]
    summary = {f"pretrained_minus_scratch_bleu_{k}": d, f"hf_minus_xs_asr_bleu_{k}": bleu[PRETRAINED] - bleu[XS_ASR],
               "goal_met": bool(d > 0), "complete": rows["summary"]["complete"]}
    return {"summary": summary, "k": k, "splits": [SEEN, UNSEEN], "langs": rows["langs"],
            "systems": {name: rows["systems"][name] for name in SYSTEMS}, "missing": rows["missing"]}


def _latencies(per_seed: dict[int, dict[str, dict[str, float]]], langs: Sequence[str]) -> dict[str, Any]:
    """``{metric: mean_std over seeds of the language average}`` for each of :data:`LATENCIES` that every
    language of every seed reports (ms)."""
    out = {}
    for metric in LATENCIES:
        if per_seed and all(metric in per_seed[s].get(lang, {}) for s in per_seed for lang in langs):
            out[metric] = mean_std([sum(per_seed[s][lang][metric] for lang in langs) / len(langs)
                                    for s in sorted(per_seed)])
    return out


def provenance(command: str) -> dict[str, Any]:
    """The results JSON's provenance record (:func:`mmst.provenance.run_record`) with :data:`DEPENDS_ON`."""
    return run_record(command, depends_on=DEPENDS_ON)


def render_markdown(report: dict[str, Any], descriptions: dict[str, str] | None = None) -> str:
    """A Markdown table: per system BLEU on both test sets and their mean, AL (and :data:`LATENCIES` where
    reported) on tst-COMMON, then the summary."""
    k = report["k"].lstrip("k")
    lat = [m for m in LATENCIES if any(m in (r.get("seen_latency") or {}) for r in report["systems"].values())]
    lines = [f"# Speech-encoder backbones at wait-{k} (equal training updates, not equal compute)", "",
             f"| system | BLEU {SEEN} | BLEU {UNSEEN} | BLEU mean | AL {SEEN} (ms) | "
             + "".join(f"{m} {SEEN} (ms) | " for m in lat) + "description |",
             "|---|---|---|---|---|" + "---|" * len(lat) + "---|"]
    for name, row in report["systems"].items():
        al = row["seen_al"]["mean"]
        ms = [(row.get("seen_latency") or {}).get(m, {}).get("mean") for m in lat]
        lines.append(f"| {name} | {row['seen_bleu']['mean']:.2f} | {row['unseen_bleu']['mean']:.2f} | {row['bleu']:.2f} | "
                     f"{'-' if al is None else f'{al:.0f}'} | " + "".join('- | ' if v is None else f'{v:.0f} | ' for v in ms)
                     + f"{(descriptions or {}).get(name, '')} |")
    s = report["summary"]
    lines += ["", ", ".join(f"{key}: {v:+.2f}" if isinstance(v, float) else f"{key}: {v}" for key, v in s.items()), ""]
    return "\n".join(lines)
