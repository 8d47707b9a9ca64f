"""Speech-encoder backbones compared at equal training compute or equal training updates, over training seeds: an
ASR-pretrained encoder (a tiny wav2vec 2.0-architecture encoder trained here on English ASR of the same synthetic
train split, then saved as a Hugging Face folder), the same encoder from scratch, and mmst's own ``xs`` encoder with
its ASR pretraining (``recipes/synthetic/run_backbones.sh``). It measures an ASR-then-ST curriculum against ST alone
on a toy corpus; it says nothing about a real pretrained model (wav2vec 2.0, HuBERT, WavLM, Whisper).

Input: evaluation directories of ``mmst-eval`` laid out as ``EVALS/<split>/<system>/seed<S>/`` for
``tst-COMMON`` and ``tst-unseen`` (:func:`mmst.evaluation.unseen_gap.collect`), systems
:data:`PRETRAINED`, :data:`SCRATCH` and :data:`XS_ASR`. Per system and test set, BLEU at one wait-k is
averaged over the languages, then over the seeds (:func:`mmst.evaluation.unseen_gap.unseen_gap_report`
gives the rows); a system's ``bleu`` is the mean of its two test sets. The summary (first key) is::

    pretrained_minus_scratch_bleu_k3 = bleu(hf_pretrained) - bleu(hf_scratch)
    hf_minus_xs_asr_bleu_k3          = bleu(hf_pretrained) - bleu(xs_asr)

(``k3`` is the wait-k of the comparison; with every seed evaluated, each is the mean over seeds of that seed's
difference), each with its ``..._interval`` ``[low, high]`` (BLEU) of the kind named by ``interval``:

* :data:`INTERVAL_BOOTSTRAP` where every evaluation holds its sentences (``<lang>/instances.log``): a paired
  bootstrap over test sentences that reuses :mod:`mmst.evaluation.policy_compare`'s (one draw of sentence indices
  per test set and language, :data:`~mmst.evaluation.policy_compare.BOOTSTRAP_SEED`, resamples every system of every
  seed, so resample r of the headline is its mean over test sets, languages and seeds on the same sentences;
  percentile interval at :data:`~mmst.evaluation.policy_compare.CI_LEVEL`); it covers the test sentences, not the
  training seeds, whose own values are listed beside it (``differences.<name>.per_seed``);
* :data:`INTERVAL_MIN_MAX` otherwise: the smallest and largest per-seed difference (two seeds or more);
* ``None`` with one seed and no sentences.

The summary also records ``seeds`` (those evaluated for every system on both test sets), ``test_splits``,
``budget`` (``updates``: the scratch system trains ST for as many updates as the pretrained one's ASR + ST;
``compute``: for as much wall-clock training time, :data:`BUDGETS`), ``train_time_s`` per system (s, the mean over
seeds of the sum over its runs, :data:`RUNS`; ``None`` where not recorded), ``goal_met`` = the first difference is
positive (the pretrained folder transfers what it holds) and ``complete`` (False while an expected evaluation is
missing).

Training time of a run (:func:`run_training_time`): ``train_time_s`` of the last ``train`` record of its
``train_log.jsonl``, the trainer's cumulative wall time of training updates (validation excluded, counted across
resumes; the same counter ``optim.stop_time_hours`` stops on), and the update of that record. Each system row holds
per seed its total and each run's ``{"train_time_s", "updates"}`` (``training``), and the mean over seeds.

Each system also gets ``seen_latency``: its ``LAAL``, ``AL_CA`` and ``LAAL_CA`` on ``tst-COMMON`` (ms; the
computation-aware ones count the encoder's compute, which a bidirectional encoder repeats over the whole
input at every chunk), averaged like AL, for each metric that every language's evaluation reports.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mmst.evaluation.compare import CompareError, mean_std
from mmst.evaluation.policy_compare import (  # the bootstrap of the policy comparison, reused
    BOOTSTRAP_SEED,
    CI_LEVEL,
    comparison_sentences,
    percentile_interval,
    resampled_difference,
)
from mmst.evaluation.unseen_gap import SEEN, UNSEEN, _lang_avg, unseen_gap_report
from mmst.provenance import run_record

PRETRAINED, SCRATCH, XS_ASR = "hf_pretrained", "hf_scratch", "xs_asr"
SYSTEMS = (PRETRAINED, SCRATCH, XS_ASR)
#: latencies reported beside AL on tst-COMMON (ms), when the evaluations have them
LATENCIES = ("LAAL", "AL_CA", "LAAL_CA")
#: how the recipe sizes the runs that are not the pretrained system's (``--budget``)
BUDGETS = ("updates", "compute")
#: the training runs of each system, ``MODELS/<run>/seed<S>/`` (ASR pretraining first); a system's training time
#: is their sum
RUNS = {PRETRAINED: ("asr_hf", PRETRAINED), SCRATCH: (SCRATCH,), XS_ASR: ("asr_xs", XS_ASR)}
#: the two differences of the summary: name -> (system, minus system)
DIFFERENCES = {"pretrained_minus_scratch": (PRETRAINED, SCRATCH), "hf_minus_xs_asr": (PRETRAINED, XS_ASR)}
#: the interval kinds of the summary (module docstring)
INTERVAL_BOOTSTRAP = f"paired bootstrap {CI_LEVEL:.0%}"
INTERVAL_MIN_MAX = "min-max over seeds"

#: The source paths the comparison exercises (the recipe, its configs, the encoders, training, export of the
#: pretrained folder, evaluation, this report); recorded with their digests in ``provenance.depends_on``.
DEPENDS_ON = ("recipes/synthetic/run_backbones.sh", "recipes/synthetic/conf/", "recipes/lib/",
              "mmst/cli/hf_encoder.py", "mmst/cli/make_asr_view.py", "mmst/cli/simultaneous_eval.py",
              "mmst/cli/backbones.py", "mmst/corpora/asr_view.py", "mmst/data/", "mmst/models/", "mmst/losses.py",
              "mmst/training/", "mmst/simultaneous/", "mmst/evaluation/")


# ------------------------------------------------------------------------------------------- training time


def run_training_time(records: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``{"train_time_s", "updates"}`` of one training run from its ``train_log.jsonl`` records.

    ``train_time_s`` (s): the last ``train`` record's ``train_time_s``, the trainer's cumulative wall time of
    training updates (validation and checkpointing excluded, counted across resumes); ``updates``: that record's
    ``update``. The trainer always logs its final update, so this is the whole run.

    Returns:
        None when no ``train`` record carries ``train_time_s`` (a log written before the trainer recorded it).
    """
    last = None
    for rec in records:
        if rec.get("kind") == "train" and rec.get("train_time_s") is not None:
            last = rec
    if last is None:
        return None
    return {"train_time_s": float(last["train_time_s"]), "updates": int(last["update"])}


def read_run_training_time(save_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """:func:`run_training_time` of ``SAVE_DIR/train_log.jsonl``; None when the file is absent or records no time.
    A line cut by a crash is skipped."""
    f = Path(save_dir) / "train_log.jsonl"
    if not f.is_file():
        return None
    records = []
    for line in f.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return run_training_time(r for r in records if isinstance(r, dict))


def total_train_time_s(save_dirs: Sequence[str | os.PathLike[str]]) -> float:
    """The summed training time (s) of the runs in ``save_dirs`` (:func:`read_run_training_time`); the recipe's
    ``--budget compute`` sizes the other systems with it.

    Raises:
        CompareError: a run without a recorded training time.
    """
    total = 0.0
    for d in save_dirs:
        rec = read_run_training_time(d)
        if rec is None:
            raise CompareError(f"{d}: no training time recorded (train_log.jsonl with train_time_s)")
        total += rec["train_time_s"]
    return total


def collect_training(models_dir: str | os.PathLike[str], seeds: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per system and seed, ``{"train_time_s": total (s) or None, "runs": {run: {"train_time_s", "updates"} or
    None}}`` from ``MODELS/<run>/seed<S>/train_log.jsonl`` (:data:`RUNS`); seeds as strings (JSON keys). A seed
    none of whose runs exists is left out."""
    out: dict[str, dict[str, Any]] = {}
    for name, runs in RUNS.items():
        per_seed: dict[str, Any] = {}
        for s in seeds:
            dirs = {run: Path(models_dir) / run / f"seed{s}" for run in runs}
            if not any(d.is_dir() for d in dirs.values()):
                continue
            recs = {run: read_run_training_time(d) for run, d in dirs.items()}
            known = all(r is not None for r in recs.values())
            per_seed[str(s)] = {"train_time_s": sum(r["train_time_s"] for r in recs.values()) if known else None,
                                "runs": recs}
        out[name] = per_seed
    return out


# ------------------------------------------------------------------------------------------- differences


def seed_differences(scores: Mapping[str, Any], a: str, b: str, langs: Sequence[str],
                     splits: Sequence[str] = (SEEN, UNSEEN)) -> dict[str, float]:
    """``{seed: bleu(a) - bleu(b)}`` (BLEU; seeds as strings) for each seed that both systems evaluated on every
    split: the mean over ``splits`` of the difference of the language averages."""
    out = {}
    common = set.intersection(*(set(scores[n].get(sp, {})) for n in (a, b) for sp in splits))
    for s in sorted(common):
        per = [(_lang_avg(scores[a][sp][s], "BLEU", langs), _lang_avg(scores[b][sp][s], "BLEU", langs))
               for sp in splits]
        if all(x is not None and y is not None for x, y in per):
            out[str(s)] = sum(x - y for x, y in per) / len(per)
    return out


def _eval_dir(evals_dir: str | os.PathLike[str], split: str, system: str, seed: int | str, k: str) -> str:
    """The folder of one evaluation's ``<lang>/instances.log``: ``seed<S>/`` or, for a sweep, ``seed<S>/<k>/``."""
    d = Path(evals_dir) / split / system / f"seed{seed}"
    return str(d / k if (d / k).is_dir() else d)


def bootstrap_difference(evals_dir: str | os.PathLike[str], a: str, b: str, seeds: Sequence[int | str],
                         langs: Sequence[str], splits: Sequence[str] = (SEEN, UNSEEN), k: str = "k3",
                         n_samples: int = 1000) -> dict[str, Any] | None:
    """Paired bootstrap of ``bleu(a) - bleu(b)``, the mean over ``splits``, ``langs`` and ``seeds`` (BLEU).

    For each test set and language, :func:`mmst.evaluation.policy_compare.bootstrap_mean_difference`'s draw of
    ``(n_samples, n_sentences)`` indices resamples both systems of every seed (sacrebleu's sentence statistics, the
    language's tokenizer); resample r of the result is the mean of those resampled differences. With one test set
    and one language this is ``bootstrap_mean_difference`` itself.

    Returns:
        ``{"delta", "low", "high", "p", "resamples", "verdict"}`` (policy_compare's percentile interval), plus
        ``per_split``: the same for each test set; None when an evaluation lacks ``instances.log`` or two systems
        decoded different numbers of sentences.

    Raises:
        CompareError: the seeds' or systems' references differ on one test set and language.
    """
    import numpy as np

    per_split: dict[str, tuple[float, Any]] = {}
    for split in splits:
        deltas, diffs = [], []
        for lang in langs:
            refs = None
            for s in seeds:
                pa, pb = ({"dir": _eval_dir(evals_dir, split, n, s, k)} for n in (a, b))
                data = comparison_sentences(lang, [pb, pa, pa])  # base b; a at weight 1 (w = 0: lower == upper)
                if data is None:
                    return None
                refs = data[0][1] if refs is None else refs
                if any(d[1] != refs for d in data):
                    raise CompareError(f"{split} {lang}: the references differ between seeds or systems")
                idx = np.random.default_rng(BOOTSTRAP_SEED).choice(len(refs), size=(n_samples, len(refs)))
                d, x = resampled_difference(lang, data, 0.0, idx)
                deltas.append(d)
                diffs.append(x)
        per_split[split] = (sum(deltas) / len(deltas), np.stack(diffs).mean(axis=0))  # (n_samples,)
    delta = sum(d for d, _ in per_split.values()) / len(per_split)
    out = percentile_interval(delta, np.stack([x for _, x in per_split.values()]).mean(axis=0))
    out["per_split"] = {sp: percentile_interval(d, x) for sp, (d, x) in per_split.items()}
    return out


def _differences(scores: Mapping[str, Any], bleu: Mapping[str, float], langs: Sequence[str], seeds: Sequence[int],
                 evals_dir: str | os.PathLike[str] | None, k: str, n_samples: int) -> dict[str, dict[str, Any]]:
    """Per :data:`DIFFERENCES` entry ``{"mean", "per_seed", "interval": {"kind", "low", "high", ...} | None}``:
    the bootstrap where every evaluation holds its sentences (both differences), else min-max over seeds."""
    boots = {}
    if evals_dir is not None and seeds:
        boots = {name: bootstrap_difference(evals_dir, a, b, seeds, langs, (SEEN, UNSEEN), k, n_samples)
                 for name, (a, b) in DIFFERENCES.items()}
    use_boot = bool(boots) and all(v is not None for v in boots.values())
    out = {}
    for name, (a, b) in DIFFERENCES.items():
        per_seed = seed_differences(scores, a, b, langs)
        if use_boot:
            interval = {"kind": INTERVAL_BOOTSTRAP, **boots[name]}
        elif len(per_seed) > 1:
            interval = {"kind": INTERVAL_MIN_MAX, "low": min(per_seed.values()), "high": max(per_seed.values())}
        else:
            interval = None
        out[name] = {"mean": bleu[a] - bleu[b], "per_seed": per_seed, "interval": interval}
    return out


# ------------------------------------------------------------------------------------------- report


def backbones_report(scores: dict[str, Any], expected_seeds: Sequence[int] = (), k: str = "k3", *,
                     evals_dir: str | os.PathLike[str] | None = None, training: Mapping[str, Any] | None = None,
                     budget: str | None = None, n_samples: int = 1000) -> dict[str, Any]:
    """The report (module docstring) from :func:`mmst.evaluation.unseen_gap.collect`'s scores of :data:`SYSTEMS`.

    Args:
        evals_dir: the EVALS folder the scores came from; its ``instances.log`` files give the bootstrap interval
            (None: min-max over seeds).
        training: :func:`collect_training`'s record (None: no training times, e.g. runs of an older recipe).
        budget: one of :data:`BUDGETS`, recorded (None: not known).
        n_samples: bootstrap resamples.

    Raises:
        CompareError: a system without an evaluation on both test sets, or an unknown ``budget``.
    """
    if budget is not None and budget not in BUDGETS:
        raise CompareError(f"budget {budget!r}: expected one of {', '.join(BUDGETS)}")
    rows = unseen_gap_report(scores, baseline=SCRATCH, expected_seeds=expected_seeds, k=k)
    bleu: dict[str, float] = {}
    for name in SYSTEMS:
        row = rows["systems"].get(name)
        if row is None or not (row["seen_bleu"]["n"] and row["unseen_bleu"]["n"]):
            raise CompareError(f"system {name!r} has no {k} evaluation on both {SEEN} and {UNSEEN}")
        bleu[name] = (row["seen_bleu"]["mean"] + row["unseen_bleu"]["mean"]) / 2
        row["bleu"] = bleu[name]
        row["seen_latency"] = _latencies(scores[name].get(SEEN, {}), rows["langs"])
        if training is not None:
            per_seed = training.get(name, {})
            row["training"] = per_seed
            row["train_time_s"] = mean_std([v["train_time_s"] for _, v in sorted(per_seed.items(), key=lambda t: int(t[0]))
                                            if v["train_time_s"] is not None])
    seeds = sorted(set.intersection(*(set(scores[n].get(sp, {})) for n in SYSTEMS for sp in (SEEN, UNSEEN))))
    diffs = _differences(scores, bleu, rows["langs"], seeds, evals_dir, k, n_samples)
    summary: dict[str, Any] = {}
    for name, d in diffs.items():
        iv = d["interval"]
        summary[f"{name}_bleu_{k}"] = d["mean"]
        summary[f"{name}_bleu_{k}_interval"] = None if iv is None else [iv["low"], iv["high"]]
    head = diffs["pretrained_minus_scratch"]
    summary.update({
        "interval": None if head["interval"] is None else head["interval"]["kind"], "seeds": seeds,
        "test_splits": [SEEN, UNSEEN], "budget": budget,
        "train_time_s": {n: rows["systems"][n].get("train_time_s", {}).get("mean") for n in SYSTEMS},
        "goal_met": bool(head["mean"] > 0), "complete": rows["summary"]["complete"]})
    return {"summary": summary, "k": k, "splits": [SEEN, UNSEEN], "langs": rows["langs"],
            "systems": {name: rows["systems"][name] for name in SYSTEMS}, "differences": diffs,
            "missing": rows["missing"]}


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


# ------------------------------------------------------------------------------------------- Markdown

#: the title's words for each budget (None: a report that does not record it)
BUDGET_WORDS = {"compute": "equal training compute: wall-clock training time, ASR included, on one machine",
                "updates": "equal training updates, not equal compute", None: "training budget not recorded"}


def updates_cell(row: Mapping[str, Any], name: str) -> str:
    """``300 + 600`` (updates of each run of :data:`RUNS`, ASR first; the mean over seeds, rounded), ``-`` when
    not recorded."""
    per_seed = [v["runs"] for v in (row.get("training") or {}).values()]
    parts = []
    for run in RUNS[name]:
        ups = [r[run]["updates"] for r in per_seed if r.get(run)]
        if not ups:
            return "-"
        parts.append(f"{sum(ups) / len(ups):.0f}")
    return " + ".join(parts)


def difference_text(report: Mapping[str, Any], name: str) -> str:
    """``+4.00 BLEU (paired bootstrap 95% [+3.10, +4.90]; per seed: 1 +3.50, 2 +4.50)`` for one of
    :data:`DIFFERENCES` (BLEU); the interval part only where the report has one."""
    d = report.get("differences", {}).get(name)
    if d is None:  # a report of the single-seed format: the summary's number only
        key = f"{name}_bleu_{report['k']}"
        return f"{report['summary'][key]:+.2f} BLEU"
    iv, per = d["interval"], d["per_seed"]
    extra = [] if iv is None else [f"{iv['kind']} [{iv['low']:+.2f}, {iv['high']:+.2f}]"]
    if per:
        extra.append("per seed: " + ", ".join(f"{s} {v:+.2f}" for s, v in per.items()))
    return f"{d['mean']:+.2f} BLEU" + (f" ({'; '.join(extra)})" if extra else "")


def render_markdown(report: dict[str, Any], descriptions: dict[str, str] | None = None) -> str:
    """A Markdown table: per system BLEU on both test sets and their mean, AL (and :data:`LATENCIES` where
    reported) on tst-COMMON, training time (s) and updates where recorded, then the two differences (each naming
    its test sets, seeds and interval) and the summary."""
    k = report["k"].lstrip("k")
    s = report["summary"]
    lat = [m for m in LATENCIES if any(m in (r.get("seen_latency") or {}) for r in report["systems"].values())]
    timed = any((r.get("train_time_s") or {}).get("n") for r in report["systems"].values())
    lines = [f"# Speech-encoder backbones at wait-{k} ({BUDGET_WORDS.get(s.get('budget'), s.get('budget'))})", "",
             f"| system | BLEU {SEEN} | BLEU {UNSEEN} | BLEU mean | AL {SEEN} (ms) | "
             + "".join(f"{m} {SEEN} (ms) | " for m in lat)
             + ("train time (s) | updates (ASR + ST) | " if timed else "") + "description |",
             "|---|---|---|---|---|" + "---|" * len(lat) + ("---|---|" if timed else "") + "---|"]
    for name, row in report["systems"].items():
        al = row["seen_al"]["mean"]
        ms = [(row.get("seen_latency") or {}).get(m, {}).get("mean") for m in lat]
        t = (row.get("train_time_s") or {}).get("mean")
        lines.append(f"| {name} | {row['seen_bleu']['mean']:.2f} | {row['unseen_bleu']['mean']:.2f} | {row['bleu']:.2f} | "
                     f"{'-' if al is None else f'{al:.0f}'} | " + "".join('- | ' if v is None else f'{v:.0f} | ' for v in ms)
                     + (f"{'-' if t is None else f'{t:.0f}'} | {updates_cell(row, name)} | " if timed else "")
                     + f"{(descriptions or {}).get(name, '')} |")
    seeds = s.get("seeds")
    over = (f"the mean over {SEEN} and {UNSEEN}, {', '.join(report['langs'])}"
            + (f", seeds {', '.join(map(str, seeds))}" if seeds else ""))
    lines += [""] + [f"{name}_bleu_{report['k']}: {difference_text(report, name)}, {over}." for name in DIFFERENCES]
    rest = {key: v for key, v in s.items() if not key.startswith(tuple(DIFFERENCES))}
    lines += ["", ", ".join(f"{key}: {_shown(v)}" for key, v in rest.items()), ""]
    return "\n".join(lines)


def _shown(v: Any) -> str:
    """A summary value for the Markdown line: lists comma-separated, a dict of seconds as ``name 12 s``."""
    if isinstance(v, dict):
        return "; ".join(f"{n} {'-' if t is None else f'{t:.0f} s'}" for n, t in v.items())
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return str(v)
