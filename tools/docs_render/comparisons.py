"""Tables of system comparisons (docs/models.md, docs/policies.md): per-language and averaged
BLEU/latency of trained systems, the hard corpus, the policy comparison's summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import md_table, num, params_m


def _cmp_cell(stat: Mapping[str, Any] | None, metric: str) -> str:
    if not stat or stat.get("mean") is None:
        return "-"
    fmt = "{:.2f}" if metric == "BLEU" else "{:.0f}"
    s = fmt.format(stat["mean"])
    return s if stat.get("std") is None else f"{s} ± {fmt.format(stat['std'])}"


def compare_avg(d: Mapping[str, Any], *, seeds_column: bool = False, lang: str = "avg") -> str:
    """Systems x (BLEU, AL) per k, one language (default the average), from a ``comparison.json``."""
    ks = d["ks"]
    head = ["system", "params"] + (["seeds"] if seeds_column else [])
    for k in ks:
        head += [f"BLEU {_k(k)}", f"AL {_k(k)}"]
    rows = []
    for s in d["systems"]:
        r = [s, params_m(d["params"].get(s))] + ([str(d["n_seeds"][s])] if seeds_column else [])
        for k in ks:
            cell = d["results"][s].get(lang, {}).get(k, {})
            r += [_cmp_cell(cell.get("BLEU"), "BLEU"), _cmp_cell(cell.get("AL"), "AL")]
        rows.append(r)
    return md_table(head, rows)


def _k(k: str) -> str:
    return "offline" if k == "offline" else f"k={k[1:]}"


def compare_langs(d: Mapping[str, Any]) -> str:
    """The systems (parameters, seeds, languages), then one table per language and ``avg``: rows = systems,
    columns = ``<metric> k=<k>``, from a ``comparison.json`` of ``eval/compare_systems.py``."""
    systems, ks, metrics = d["systems"], d["ks"], d.get("metrics", ["BLEU", "AL"])
    out = [md_table(["system", "parameters", "seeds", "languages"],
                    [[s, params_m(d["params"].get(s)), (d.get("n_seeds") or {}).get(s, 1),
                      ", ".join(x for x in d["results"][s] if x != "avg")] for s in systems])]
    for lang in [*d["langs"], "avg"]:
        rows = [[s, params_m(d["params"].get(s)),
                 *(_cmp_cell(d["results"][s][lang].get(k, {}).get(m), m) for k in ks for m in metrics)]
                for s in systems if d["results"][s].get(lang) is not None]
        title = lang if lang != "avg" else "avg (unweighted mean over each system's languages)"
        out += [f"### {title}", md_table(["system", "params", *(f"{m} {_k(k)}" for k in ks for m in metrics)], rows)]
    return "\n\n".join(out)


def hard_waitk(d: Mapping[str, Any]) -> str:
    """BLEU (AL ms) per language and model at k = 1, 3, 5 and offline, and the drop vs offline."""
    wk = [k for k in d["ks"] if k != "offline"]
    head = ["lang", "model", *[_k(k) for k in wk], "offline",
            "drop " + " / ".join(_k(k) for k in wk) + " vs offline"]
    rows = []
    for lang in [*d["langs"], "avg"]:
        for s in d["systems"]:
            r = d["results"][s][lang]
            off = r["offline"]["BLEU"]["mean"]
            cells = [f"{r[k]['BLEU']['mean']:.2f} ({r[k]['AL']['mean']:.0f})" for k in wk]
            drop = " / ".join(f"{off - r[k]['BLEU']['mean']:.1f}" for k in wk)
            rows.append([lang, s, *cells, f"{off:.2f}", drop])
    return md_table(head, rows)


def offline_bleu(d: Mapping[str, Any]) -> str:
    """Offline greedy BLEU per language, one row per (system, test set), from an ``offline_xs`` JSON."""
    langs = d["langs"]
    rows = []
    for test in d["test_sets"]:
        cmp = d["results"][test]
        for s in cmp["systems"]:
            vals = [cmp["results"][s][lang]["offline"]["BLEU"]["mean"] for lang in langs]
            avg = cmp["results"][s]["avg"]["offline"]["BLEU"]["mean"]
            rows.append([s, params_m(cmp["params"][s]), test, *(f"{v:.2f}" for v in vals), f"{avg:.2f}"])
    return md_table(["model", "params", "test set", *langs, "avg"], rows)


def policies_summary(d: Mapping[str, Any], full: str) -> str:
    """The summary of a policy comparison (``mmst-policy-results``): on the offline-trained model, the
    languages where an adaptive policy beats wait-k at wait-k's own latency, per k (with training seeds: the mean
    difference over seeds, in a sentence that names the test set, seeds, tune split, interval and correction), the
    range of the sweeps, and the best policy per language; then a link to the full tables ``full`` (its Markdown)."""
    s, langs = d["summary"], d["langs"]
    metric = s.get("metric", "AL")
    corr = s.get("correction")
    tie = (f"a win not significant after Holm's correction over the {corr['tests']} paired bootstrap tests of the "
           f"table is a tie" if corr else "a win inside the paired bootstrap interval is a tie")
    ks = list(s["langs_adaptive_beats_waitk_offline_model"])
    if s.get("seeds"):   # training seeds: one sentence names test set, seeds, tune split, interval and correction
        from mmst.evaluation.policy_compare import seeds_headline

        out = [seeds_headline(d)]
    else:
        out = [f"Test set: {d['split']}, first {d['n_utterances']} utterances.",
               f"Languages (of {len(langs)}) where an adaptive policy scores more BLEU than wait-k at wait-k's own "
               f"{metric} (offline-trained model; {tie}): "
               + ", ".join(f"k={k[1:]}: **{s['langs_adaptive_beats_waitk_offline_model'][k]}**" for k in ks) + "."]
    if s.get("points_per_policy_min") is not None:
        out.append(f"Over every point of every sweep: lowest LAAL {num(s['min_laal_ms'], '{:.0f}')} ms, length ratio "
                   f"{num(s['min_length_ratio'])} to {num(s['max_length_ratio'])}, at least "
                   f"{s['points_per_policy_min']} points per policy.")
    out.append(md_table(["lang", *(f"best at k={k[1:]} {metric}" for k in ks)],
                        [[lang, *(s["best_policy_per_lang"][lang][k] for k in ks)] for lang in langs]))
    out += _policies_reach(d)
    out.append(f"Full tables: [{full}](results/{full}).")
    return "\n\n".join(out)


def _policies_reach(d: Mapping[str, Any]) -> list[str]:
    """The sweeps that miss an end of wait-k's LAAL range for k=1..5 (the JSON's ``coverage``, or computed from
    its sweeps by :func:`mmst.evaluation.policy_compare.waitk_range_coverage` for results written before it)."""
    from mmst.evaluation.policy_compare import policy_label, waitk_range_coverage

    cov = d.get("coverage") or {m: waitk_range_coverage(sw, d["langs"]) for m, sw in d.get("sweeps", {}).items()}
    rows, total = [], 0
    for model, per in cov.items():
        for pol, per_lang in per.items():
            total += len(per_lang)
            miss = {end: [lang for lang, c in per_lang.items() if end in c["unreached"]] for end in ("low", "high")}
            if miss["low"] or miss["high"]:
                rows.append([model, policy_label(pol, d["sweeps"][model].get(pol, {})),
                             ", ".join(miss["low"]) or "-", ", ".join(miss["high"]) or "-"])
    if not total:
        return []
    short = sum(1 for per in cov.values() for pl in per.values() for c in pl.values() if c["unreached"])
    if not short:
        return [f"Every sweep reaches both ends of wait-k's LAAL range for k=1..5 on every language ({total} sweeps)."]
    return [f"{short} of {total} sweeps (model x policy x language) do not reach an end of wait-k's LAAL range for "
            f"k=1..5; at a wait-k latency beyond its reach a sweep is compared on nothing (a dash):",
            md_table(["model", "policy", "lowest wait-k LAAL (k=1) not reached on", "highest (k=5) not reached on"],
                     rows)]
