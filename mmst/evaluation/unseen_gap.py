"""Seen-vs-unseen-voice comparison of systems: BLEU and AL on two test sets, and the gap between them.

Input: evaluation directories of ``eval/simultaneous_eval.py`` laid out as
``EVALS/<split>/<system>/seed<S>/`` for a SEEN split (voices heard in training, ``tst-COMMON``) and an
UNSEEN split (``tst-unseen``). For one wait-k (``k3``) and every system:

* ``seen_bleu`` / ``unseen_bleu``: BLEU averaged over the languages and the seeds (each seed's
  language average, then the mean over seeds); AL likewise (ms);
* ``gap`` = ``seen_bleu - unseen_bleu``, over the seeds evaluated on BOTH splits only.

The summary (first key of the report) is ``{"unseen_gap_none": gap of the baseline, "unseen_gap_best":
gap of the best system, "best_system": the system with the highest unseen_bleu, "seen_bleu_change_best":
seen_bleu(best) - seen_bleu(baseline)}``, plus ``goal_met``: the best system halves the baseline's
gap and loses at most 0.5 seen BLEU. ``complete`` is False (and ``missing`` lists what) while some
expected (system, seed, split) has no evaluation: a partial report.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mmst.evaluation.compare import CompareError, mean_std, read_eval_dir
from mmst.provenance import run_record

SEEN, UNSEEN = "tst-COMMON", "tst-unseen"

#: The source paths the augmentation experiment exercises (``recipes/synthetic/run_augment.sh``: speed
#: perturbation, training with SpecAugment, evaluation on both test sets, this report); recorded with their
#: digests in ``provenance.depends_on``.
DEPENDS_ON = ("recipes/synthetic/run_augment.sh", "recipes/synthetic/conf/", "recipes/lib/",
              "mmst/cli/speed_perturb.py", "mmst/cli/simultaneous_eval.py", "mmst/cli/unseen_gap.py",
              "mmst/audio.py", "mmst/features.py", "mmst/gain.py", "mmst/cmvn.py", "mmst/corpora/speed_perturb.py",
              "mmst/data/", "mmst/models/", "mmst/losses.py", "mmst/training/", "mmst/simultaneous/",
              "mmst/evaluation/")


def _seed_of(name: str) -> int:
    m = re.fullmatch(r"seed(\d+)", name)
    if not m:
        raise CompareError(f"expected seed<N> directories, got {name!r}")
    return int(m.group(1))


def collect(evals_dir: str | os.PathLike[str], systems: Sequence[str], k: str = "k3",
            splits: Sequence[str] = (SEEN, UNSEEN)) -> dict[str, dict[str, dict[int, dict[str, dict[str, float]]]]]:
    """Scores at ``k`` as ``{system: {split: {seed: {lang: {"BLEU", "AL", ...}}}}}`` (what exists).

    Raises:
        CompareError: an evaluation directory without the ``k`` result or unreadable.
    """
    out: dict[str, dict[str, dict[int, dict[str, dict[str, float]]]]] = {}
    for sys_name in systems:
        out[sys_name] = {}
        for split in splits:
            base = Path(evals_dir) / split / sys_name
            per: dict[int, dict[str, dict[str, float]]] = {}
            if base.is_dir():
                for d in sorted(base.iterdir()):
                    if not (d / "scores.json").is_file():
                        continue
                    sweep, _ = read_eval_dir(d)
                    if k not in sweep:
                        raise CompareError(f"{d}: no result at {k} (has {sorted(sweep)})")
                    per[_seed_of(d.name)] = sweep[k]
            out[sys_name][split] = per
    return out


def _lang_avg(per_lang: dict[str, dict[str, float]], metric: str, langs: Sequence[str]) -> float | None:
    vals = [per_lang[x][metric] for x in langs if metric in per_lang.get(x, {})]
    return sum(vals) / len(vals) if vals and len(vals) == len(langs) else None


def unseen_gap_report(scores: dict[str, dict[str, dict[int, dict[str, dict[str, float]]]]], baseline: str = "none",
                      expected_seeds: Sequence[int] = (), seen: str = SEEN, unseen: str = UNSEEN,
                      k: str = "k3") -> dict[str, Any]:
    """The report (see the module docstring) from :func:`collect`'s scores.

    Raises:
        CompareError: the baseline has no seed evaluated on both splits (no gap to compare with).
    """
    langs: list[str] = []
    for per_split in scores.values():
        for per_seed in per_split.values():
            for per_lang in per_seed.values():
                langs += [x for x in per_lang if x not in langs]
    systems: dict[str, Any] = {}
    missing: list[str] = []
    for name, per_split in scores.items():
        row: dict[str, Any] = {"seeds": {}}
        for split in (seen, unseen):
            for s in expected_seeds:
                if s not in per_split.get(split, {}):
                    missing.append(f"{name} seed {s} {split}")
        for split, key in ((seen, "seen"), (unseen, "unseen")):
            per_seed = per_split.get(split, {})
            for metric in ("BLEU", "AL"):
                vals = {s: _lang_avg(pl, metric, langs) for s, pl in per_seed.items()}
                vals = {s: v for s, v in vals.items() if v is not None}
                row[f"{key}_{metric.lower()}"] = mean_std([vals[s] for s in sorted(vals)])
            row[f"{key}_per_lang"] = {lang: mean_std([per_seed[s][lang]["BLEU"] for s in sorted(per_seed)
                                                      if "BLEU" in per_seed[s].get(lang, {})]) for lang in langs}
        both = sorted(set(per_split.get(seen, {})) & set(per_split.get(unseen, {})))
        pairs = [(_lang_avg(per_split[seen][s], "BLEU", langs), _lang_avg(per_split[unseen][s], "BLEU", langs))
                 for s in both]
        gaps = [a - b for a, b in pairs if a is not None and b is not None]  # a seed without a score has no gap
        row["gap"] = mean_std(gaps)
        row["seeds"] = {seen: sorted(per_split.get(seen, {})), unseen: sorted(per_split.get(unseen, {}))}
        systems[name] = row
    if baseline not in systems or systems[baseline]["gap"]["n"] == 0:
        raise CompareError(f"baseline system {baseline!r} has no seed evaluated on both {seen} and {unseen}")
    ranked = [s for s in systems if systems[s]["unseen_bleu"]["n"] and systems[s]["gap"]["n"]]
    best = max(ranked, key=lambda s: systems[s]["unseen_bleu"]["mean"])
    g0, g1 = systems[baseline]["gap"]["mean"], systems[best]["gap"]["mean"]
    d = systems[best]["seen_bleu"]["mean"] - systems[baseline]["seen_bleu"]["mean"]
    summary = {"unseen_gap_none": g0, "unseen_gap_best": g1, "best_system": best, "seen_bleu_change_best": d,
               "goal_met": bool(g1 <= g0 / 2 and d >= -0.5), "complete": not missing}
    return {"summary": summary, "k": k, "seen_split": seen, "unseen_split": unseen, "langs": langs,
            "baseline": baseline, "systems": systems, "missing": missing}


def provenance(command: str) -> dict[str, Any]:
    """The results JSON's provenance record (:func:`mmst.provenance.run_record`) for ``command``, with the
    experiment's :data:`DEPENDS_ON`."""
    return run_record(command, depends_on=DEPENDS_ON)


def _fmt(ms: dict[str, Any], nd: int = 2) -> str:
    if not ms or ms.get("mean") is None:
        return "-"
    s = f"{ms['mean']:.{nd}f}"
    return s + (f" ± {ms['std']:.{nd}f}" if ms.get("std") is not None else "")


def render_markdown(report: dict[str, Any], title: str, descriptions: dict[str, str] | None = None,
                    extra: dict[str, dict[str, Any]] | None = None) -> str:
    """Markdown tables of a report: per system the two test sets' BLEU/AL, the gap, then per language.

    ``extra``: more columns per system, e.g. ``{"loader wait %": {system: value}}``.
    """
    s, k = report["summary"], report["k"].lstrip("k")
    seen, unseen = report["seen_split"], report["unseen_split"]
    p = report.get("provenance") or {}
    lines = [f"# {title}", ""]
    if p:
        m = p.get("machine", {})
        lines += [f"`{p.get('command')}` ({p.get('date')}, commit {str(p.get('git_commit'))[:10]}, "
                  f"{m.get('cpu_model') or m.get('cpu')}, {m.get('cores')} cores, torch {m.get('torch')}).", ""]
    if report.get("note"):
        lines += [f"**Note**: {report['note']}", ""]
    if not s["complete"]:
        lines += ["**Partial results**: not every system and seed has been evaluated. Missing: "
                  + "; ".join(report["missing"]) + ".", ""]
    lines += [f"wait-k = {k}, joint decoding, BLEU (sacrebleu) and AL (ms) averaged over {', '.join(report['langs'])} "
              f"and the seeds (mean ± sample std over seeds). Gap = {seen} BLEU − {unseen} BLEU (voices heard in "
              "training vs never heard).", ""]
    ex = extra or {}
    head = ["system", "seeds", f"{seen} BLEU", f"{seen} AL", f"{unseen} BLEU", f"{unseen} AL", "gap", *ex]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in report["systems"].items():
        n = r["seen_bleu"]["n"]
        cells = [name, str(n), _fmt(r["seen_bleu"]), _fmt(r["seen_al"], 0), _fmt(r["unseen_bleu"]),
                 _fmt(r["unseen_al"], 0), _fmt(r["gap"])]
        cells += [("-" if v.get(name) is None else f"{v[name]:.2f}") for v in ex.values()]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Summary: the gap is {s['unseen_gap_none']:.2f} BLEU without augmentation and "
              f"{s['unseen_gap_best']:.2f} with the best system on {unseen} (`{s['best_system']}`), whose {seen} "
              f"BLEU changes by {s['seen_bleu_change_best']:+.2f}. Goal (halve the gap, lose at most 0.5 {seen} "
              f"BLEU): {'met' if s['goal_met'] else 'not met'}"
              + ("" if s["complete"] else " on the evaluations that exist so far (partial)") + ".", ""]
    if descriptions:
        lines += ["| system | what |", "|---|---|"] + [f"| {n} | {d} |" for n, d in descriptions.items()] + [""]
    lines += [f"BLEU per language (k = {k}):", "",
              "| system | " + " | ".join(f"{lang} {sp}" for lang in report["langs"] for sp in ("seen", "unseen"))
              + " |", "|" + "---|" * (1 + 2 * len(report["langs"]))]
    for name, r in report["systems"].items():
        cells = [c for lang in report["langs"] for c in (_fmt(r["seen_per_lang"][lang]), _fmt(r["unseen_per_lang"][lang]))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def cost_table(bench: dict) -> str:
    """Markdown table of the augmentation rows of a ``bench/bench_train.py`` JSON."""
    m = bench.get("meta", {})
    lines = [f"Augmentation cost per batch (`bench/bench_train.py`, {m.get('cpu_model') or m.get('cpu')} x{m.get('cpu_count')}, torch "
             f"{m.get('torch')}, ~{m.get('frames_per_batch')} frames per batch"
             + (f" of {m['data']}" if m.get("data") else "") + "):", "",
             "| model | threads | utterances | update s | SpecAugment ms | % of update | on-the-fly speed perturbation "
             "(soxr + fbank) ms | % of update | loader wait % |", "|---|---|---|---|---|---|---|---|---|"]
    for r in bench.get("results", []):
        if "specaugment_pct" not in r:
            continue
        lw = r.get("loader_wait_pct")
        lines.append(f"| {r['size']} {r['precision']} | {r['threads']} | {r['batch_utts']} | {r['s_per_update']:.2f} | "
                     f"{1000 * r['specaugment_s_per_batch']:.1f} ({r['specaugment']}) | {r['specaugment_pct']:.2f}% | "
                     f"{1000 * r['speed_onthefly_s_per_batch']:.0f} | {r['speed_onthefly_pct']:.1f}% | "
                     + ("-" if lw is None else f"{lw:.2f}") + " |")
    return "\n".join(lines) + "\n"


def prep_line(rep: dict) -> str:
    """One sentence on the prep-time cost of the speed-perturbed copies (``speed_perturb_<split>.json``)."""
    pf = rep.get("per_factor", {})
    n = sum(v["utterances"] for k, v in pf.items() if k != "1")
    frames = {k: v["frames"] for k, v in pf.items()}
    return (f"Speed-perturbed copies at prep time: {n} copies ({rep.get('resampler')}, {rep.get('jobs')} process) in "
            f"{rep.get('feature_seconds')} s of feature extraction; frames per factor {frames} "
            f"(`{rep.get('manifest')}`).\n")
