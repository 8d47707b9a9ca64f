#!/usr/bin/env python
"""Render every results table in README.md and docs/ from the committed JSON files in docs/results/.

A table lives between two markers in a Markdown file::

    <!-- results:NAME -->
    (generated text: the table and a line naming its JSON, command, date and machine)
    <!-- /results:NAME -->

``NAME`` is a key of :data:`TABLES`, which names the JSON file under ``docs/results/`` and the function
that turns it into Markdown. The marker ``<!-- generated:config-keys -->`` ... ``<!-- /generated:config-keys
-->`` holds the ``mmst-train`` config key reference, generated from the field documentation of
:mod:`mmst.training.config` (the same text as ``mmst-train --help``); ``generated:results-index`` (in
``docs/index.md``) lists every results JSON with its run and its freshness. A page that a writer wrote beside
its JSON (``docs/results/NAME.md`` next to ``NAME.json``, without markers) keeps that JSON's stale or
superseded line at its top.

Freshness: each JSON's ``provenance.depends_on`` holds a digest of every file its run used: the modules it
imported and the paths its writer declared (:mod:`mmst.provenance`; records of the old form hold one digest per
declared folder). When a digest no longer matches the tree, the JSON is *stale*: the code it measures has
changed since, and the files that changed are named. A stale table gets one rendered line under it
(``**Stale:** measured at commit X; the code it measures has changed since (`file`, ...)``); a JSON without the
record counts as stale too (dependencies unknown). A JSON with a top-level ``"superseded_by": "NAME.json"`` is an
archived run that a later one replaced: it shows as superseded, never as stale. Staleness is information, not an
error: ``--check`` compares the tables with their JSON and ignores the stale lines and the index's freshness
column; a fresh render writes them.

Usage::

    python tools/render_docs.py            # rewrite every marked block in README.md and docs/**/*.md
    python tools/render_docs.py --check    # exit 1 (and list them) when a block differs from its source
    python tools/render_docs.py --stale    # list the results JSON whose code has changed since (exit 0)
    python tools/render_docs.py --stale --root DIR   # the same for another checkout or an unpacked tarball
    python tools/render_docs.py --list     # the table names and their JSON files

Errors (exit 2): an unknown NAME, a marker without its closing marker, a missing or unreadable JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
sys.path.insert(0, str(REPO))  # this checkout's mmst, also where it is not installed (a tarball, a shallow clone)

from mmst.provenance import changed_dependencies, is_folder_form, tree_files  # noqa: E402

MARKER = re.compile(r"<!-- (results|generated):([A-Za-z0-9_.-]+) -->\n(.*?)<!-- /\1:\2 -->", re.S)
OPEN = re.compile(r"<!-- (results|generated):([A-Za-z0-9_.-]+) -->")
#: The rendered line under a stale table (``--check`` ignores it: staleness is not a mismatch with the JSON).
STALE_LINE = re.compile(r"^\*\*Stale:\*\* .*\n\n", re.M)
#: The results index block; ``--check`` ignores its last column (freshness).
INDEX_BLOCK = re.compile(r"(<!-- generated:results-index -->\n)(.*?)(<!-- /generated:results-index -->)", re.S)


class RenderError(Exception):
    """A marker or a results file that cannot be rendered (message names file and line)."""


# ----------------------------------------------------------------------------------------------- format
def num(x: Any, fmt: str = "{:.2f}") -> str:
    """``fmt`` applied to a number; ``-`` for ``None``/missing, ``inf`` for infinity."""
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    return fmt.format(x)


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def params_m(n: int | None) -> str:
    """Parameter count in millions (``4.33M``)."""
    return "-" if n is None else f"{n / 1e6:.2f}M"


def source_line(name: str, data: Mapping[str, Any]) -> str:
    """One line naming the JSON file and its provenance (command, date, commit, machine)."""
    p = data.get("provenance")
    if not p:
        return f"Source: `docs/results/{name}` (no provenance record)."
    m = p.get("machine") or {}
    mach = ", ".join(x for x in (m.get("cpu_model"), f"{m['cores']} cores" if m.get("cores") else None,
                                 f"torch {m['torch']}" if m.get("torch") else None) if x)
    full = p.get("git_commit") or ""
    commit = full[:10] + ("-dirty" if full.endswith("-dirty") else "")  # uncommitted changes stay visible
    return (f"Source: `docs/results/{name}`, written by `{p.get('command', '?')}` on {str(p.get('date', '?'))[:10]}"
            + (f" at commit `{commit}`" if commit else "") + (f"; machine: {mach}" if mach else "") + ".")


# ----------------------------------------------------------------------------------------------- tables
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


QUICKSTART_METRICS = ("BLEU", "AL", "LAAL", "AL_CA")


def quickstart_sweep(d: Mapping[str, Any]) -> str:
    """Per-language and average BLEU/AL/LAAL/AL_CA at every k of an ``eval/simultaneous_eval.py`` sweep."""
    rows = []
    for lang in [*d["langs"], "avg"]:
        for k in d["ks"]:
            e = d["sweep"][f"k{k}"]
            r = e["average"] if lang == "avg" else e["per_lang"][lang]
            rows.append([lang, k, *(num(r.get(m)) for m in QUICKSTART_METRICS)])
    return md_table(["lang", "k", *QUICKSTART_METRICS], rows)


def quickstart_single(d: Mapping[str, Any]) -> str:
    """Per-language and average BLEU/AL/LAAL/AL_CA of one ``scores.json`` (one k)."""
    langs = list(d["per_lang"])
    rows = [[lang, *(num(d["per_lang"][lang].get(m)) for m in QUICKSTART_METRICS)] for lang in langs]
    rows.append(["avg", *(num(d["average"].get(m)) for m in QUICKSTART_METRICS)])
    k = (d.get("config") or {}).get("waitk")
    return f"wait-{k}:\n\n" + md_table(["lang", *QUICKSTART_METRICS], rows) if k else md_table(
        ["lang", *QUICKSTART_METRICS], rows)


def quickstart_stages(d: Mapping[str, Any]) -> str:
    """Seconds per recipe stage (``EXP/.done/stageN``), with ``make setup`` before them and the whole
    ``make demo`` after them when the run recorded them."""
    st = d.get("stage_seconds") or {}
    names = d.get("stage_names") or {}
    rows = [[s, names.get(s, ""), num(v, "{:.0f}")] for s, v in sorted(st.items(), key=lambda x: int(x[0]))]
    if d.get("setup_seconds") is not None:
        rows.insert(0, ["setup", "make setup and the system packages", num(d["setup_seconds"], "{:.0f}")])
    if d.get("total_seconds") is not None:
        rows.append(["total", "the whole `make demo`, setup included", num(d["total_seconds"], "{:.0f}")])
    return md_table(["stage", "what", "seconds"], rows)


#: The wall-time budget of ``make demo`` on 2 cores, setup included (docs/development.md).
DEMO_BUDGET_S = 720


def quickstart_total(d: Mapping[str, Any]) -> str:
    """One sentence: how long ``make demo`` took in wall time, setup included, and how much was training."""
    total, train = d.get("total_seconds"), (d.get("stage_seconds") or {}).get("2")
    if total is None:
        return "The run did not record its total time (it was not started by `make demo`)."
    m = d["provenance"]["machine"]
    verdict = "met" if total <= DEMO_BUDGET_S else "**missed**"
    return (f"`make demo` took {total / 60:.1f} minutes wall on {m.get('cores')} cores ({m.get('cpu_model')}), "
            f"setup included (budget {DEMO_BUDGET_S / 60:.0f} minutes: {verdict}); training was "
            f"{num(train, '{:.0f}')} s of it.")


def quickstart_curve(d: Mapping[str, Any]) -> str:
    """Dev BLEU (mean over languages) at k = 1, 3, 5 per validated update, and wait-3 BLEU on both test sets
    where the checkpoint was evaluated (``bench/bench_quickstart_curve.py``)."""
    rows = []
    for r in d["dev_curve"]:
        t = d["test_wait3"].get(str(r["update"]), {})
        mark = " (chosen)" if r["update"] == d["chosen_update"] else ""
        rows.append([f"{r['update']}{mark}", num(r["k1"]), num(r["k3"]), num(r["k5"]), num(r["mean"]),
                     num((t.get("tst-COMMON") or {}).get("avg")), num((t.get("tst-unseen") or {}).get("avg"))])
    return (md_table(["updates", "dev k=1", "dev k=3", "dev k=5", "dev mean", "tst-COMMON k=3", "tst-unseen k=3"], rows)
            + f"\n\nChosen on dev: the first update whose dev mean is within {num(d['dev_margin'])} BLEU of the "
              f"run's best ({d['chosen_update']} updates).")


def stragglers(d: Mapping[str, Any]) -> str:
    """The straggler benchmark's rows (same columns as ``bench/bench_stragglers.py`` prints)."""
    head = ["W", "scenario", "mode", "samples/s", "eff. vs W x 1", "ratio to cv0", "x DDP", "pred. eff (MC/Blom)",
            "drop rate (pred.)", "tau ms", "overshoot ms, slowest rank (pred.)", "staleness mean/max",
            "time to target s"]
    rows = []
    for r in d["rows"]:
        if "error" in r:
            rows.append([r["W"], r["scenario"], r["mode"], "error: " + r["error"][:60], *["-"] * 9])
            continue
        mode = r["mode"]
        pred = (f"{num(r.get('pred_eff_mc'))}/{num(r.get('pred_eff_blom'))}" if mode == "ddp"
                else (f"x{num(r.get('pred_speedup'))} vs sync" if mode == "dropcompute" else "-"))
        drop = (f"{num(r.get('drop_rate'), '{:.3f}')} ({num(r.get('pred_drop_rate'), '{:.3f}')})"
                if mode == "dropcompute" else "-")
        tau = num(r["tau_s"] * 1000 if r.get("tau_s") is not None else None, "{:.1f}") if mode == "dropcompute" else "-"
        stale = f"{num(r.get('staleness_mean'))}/{r.get('staleness_max')}" if mode == "param-server" else "-"
        over = "-"
        if mode == "dropcompute" and r.get("overshoot_s") is not None:  # measured since the faithful injection
            pred_over = r.get("pred_overshoot_s")
            # the slowest rank's overshoot (what Eq. 7 predicts); results written before it was measured have
            # rank 0's only, marked as such
            meas = (num(r["overshoot_s_max"] * 1000, "{:.1f}") if r.get("overshoot_s_max") is not None
                    else "rank 0: " + num(r["overshoot_s"] * 1000, "{:.1f}"))
            over = f"{meas} ({num(pred_over * 1000 if pred_over is not None else None, '{:.1f}')})"
        rows.append([r["W"], r["scenario"], mode, num(r["samples_per_s"], "{:.0f}"), num(r.get("efficiency")),
                     num(r.get("ratio_to_cv0")), num(r.get("speedup_vs_ddp")), pred, drop, tau, over, stale,
                     num(r.get("time_to_target_s"))])
    return md_table(head, rows) + "\n\n" + stragglers_model_check(d)


def stragglers_model_check(d: Mapping[str, Any]) -> str:
    """One line: the largest gap, in efficiency points, between measured DDP efficiency and the analytic
    model's (Monte Carlo, Blom) over the DDP rows with injected variance (W >= 2)."""
    gaps = {"mc": [], "blom": []}
    for r in d["rows"]:
        if r.get("mode") != "ddp" or r.get("scenario") == "cv0" or r.get("W", 1) < 2 or r.get("efficiency") is None:
            continue
        for k in gaps:
            if r.get(f"pred_eff_{k}") is not None:
                gaps[k].append((abs(r["efficiency"] - r[f"pred_eff_{k}"]) * 100, f"W={r['W']} {r['scenario']}"))
    if not gaps["mc"]:
        return "DDP vs the analytic model: no DDP row with injected variance."
    (mc, mc_at), (bl, bl_at) = max(gaps["mc"]), max(gaps["blom"] or [(float("nan"), "-")])
    return (f"DDP efficiency vs the analytic model, over the {len(gaps['mc'])} DDP rows with injected variance: "
            f"largest gap {mc:.1f} points to Monte Carlo ({mc_at}), {bl:.1f} points to Blom ({bl_at}).")


def stragglers_mmst(d: Mapping[str, Any]) -> str:
    """The real-model straggler benchmark: its seed-mean table (with the goal lines) and the setup."""
    c = d["config"]
    per_core = ", ".join(f"W = {w}: {float(x):.1f}" for w, x in sorted(c.get("ranks_per_core", {}).items()))
    curve_seeds = c.get("curve_seeds", len(c.get("seeds", [])))
    n = len(c["seeds"])
    seeds = (f"{n} seeds per row" if curve_seeds >= n else
             f"{n} seeds per row, of which {curve_seeds} trained {c['updates']} updates with validation every "
             f"{c['valid_every']} (dev-loss curve, time to target) and the others "
             f"{c.get('throughput_updates', c['updates'])} updates (throughput only)")
    if curve_seeds >= n:
        seeds += (f", each trained {c['updates']} updates with validation every {c['valid_every']} (dev-loss curve, "
                  f"time to target)")
    if c.get("oversubscribed_seeds"):
        seeds += f" ({c['oversubscribed_seeds']} in the oversubscribed W > {c.get('cores', '?')} rows)"
    if c.get("valid_utterances"):
        seeds += f"; validation on the first {c['valid_utterances']} dev utterances (the same for every run)"
    return (d["table_markdown"] + "\n\n"
            f"Setup: {seeds}; M = {c['update_freq']} micro-batches "
            f"of <= {c['max_tokens']} padded frames per rank and update; throughput over log windows of "
            f"{c.get('log_every', c['valid_every'])} updates after the first; target dev loss per W from the "
            f"single-process run ({', '.join(f'W = {w}: {float(t):.3f}' for w, t in sorted(d['targets'].items()))}); "
            f"processes per core, counting the parameter server's extra process ({per_core}); the runs took "
            f"{float(d.get('runs_wall_s', d['runtime_s'])) / 60:.0f} min."
            + (f" Target: {c['target_rule']}. Time to target: {c['time_to_target']}." if c.get("target_rule") else ""))


def stragglers_mmst_summary(d: Mapping[str, Any]) -> str:
    """One paragraph: the headline ratios of the real-model straggler benchmark and whether each goal is met."""
    s, g = d["summary"], d["goals"]
    w = max((r["W"] for r in d["aggregate"]), default="?")
    cores = d["config"].get("cores") or (d.get("provenance") or {}).get("machine", {}).get("cores")
    over = f", oversubscribed: {w} ranks on {cores} cores" if cores and isinstance(w, int) and w > cores else ""
    return _stragglers_w2(d) + (f"On the speech model at W = {w} (lognormal CV 0.5{over}): DropCompute reached "
            f"{num(s['dropcompute_over_ddp_samples_per_s'])}x DDP's samples/s (goal >= 1.08: "
            f"{g['dropcompute_over_ddp_samples_per_s']}) at a drop rate of "
            f"{num(s['dropcompute_drop_rate'], '{:.3f}')} (goal <= 0.15: {g['dropcompute_drop_rate']}), and "
            f"{num(s['dropcompute_over_ddp_time_to_target'])}x DDP's time to the target dev loss (goal <= 1: "
            f"{g['dropcompute_over_ddp_time_to_target']}). With one 2x slow rank the parameter server reached "
            f"{num(s['param_server_over_ddp_slow_rank'])}x DDP's samples/s (goal >= 1.2: "
            f"{g['param_server_over_ddp_slow_rank']})." + _stragglers_control(d, w))


def _stragglers_w2(d: Mapping[str, Any]) -> str:
    """The W = 2, one-2x-slow-rank headline (one core per rank on 2 cores), when the results have it."""
    s, g = d["summary"], d["goals"]
    if "dropcompute_over_ddp_samples_per_s_slow_w2" not in s:
        return ""

    def goal(k: str) -> str:
        return g.get(k, "not measured")

    return (f"On the speech model at W = 2 with one 2x slow rank (one core per rank): DropCompute reached "
            f"{num(s['dropcompute_over_ddp_samples_per_s_slow_w2'])}x{_ci(d, 2, 'slow', 'dropcompute')} DDP's "
            f"samples/s (goal >= 1.15: "
            f"{goal('dropcompute_over_ddp_samples_per_s_slow_w2')}) at a drop rate of "
            f"{num(s['dropcompute_drop_rate_slow_w2'], '{:.3f}')} (goal <= 0.3: {goal('dropcompute_drop_rate_slow_w2')}), "
            f"and {num(s['dropcompute_over_ddp_time_to_target_slow_w2'])}x DDP's time to the target dev loss (median "
            f"over {s.get('curve_seeds')} curve seeds; goal <= 0.8: {goal('dropcompute_over_ddp_time_to_target_slow_w2')}). "
            f"The model's samples/s predictions for DDP and DropCompute at W = 2 were off by at most "
            f"{num(s['prediction_error_samples_per_s_max'], '{:.3f}')} (relative; goal <= 0.15: "
            f"{goal('prediction_error_samples_per_s_max')}). The parameter server (a third process on 2 cores) reached "
            f"{num(s['param_server_over_ddp_samples_per_s_slow_w2'])}x{_ci(d, 2, 'slow', 'param-server')} DDP's "
            f"samples/s (reported, no goal)." + _stragglers_ln_w2(d) + _stragglers_control(d, 2)
            + _stragglers_sync_prediction(d)
            + _stragglers_ci_note(d) + "\n\n")


def _stragglers_ln_w2(d: Mapping[str, Any]) -> str:
    """At W = 2 with lognormal delays: DropCompute's and the parameter server's samples/s ratios to DDP."""
    by = {r["mode"]: r for r in d["aggregate"] if (r["W"], r["scenario"]) == (2, "ln0.5")}
    parts = [f"{what} {num(by[m]['x_ddp_samples_per_s'])}x{_ci(d, 2, 'ln0.5', m)}"
             for m, what in (("dropcompute", "DropCompute"), ("param-server", "the parameter server"))
             if by.get(m, {}).get("x_ddp_samples_per_s")]
    return (" With lognormal CV 0.5 at W = 2 the samples/s ratios to DDP were: " + ", ".join(parts) + ".") if parts else ""


def _ci(d: Mapping[str, Any], w: Any, scen: str, mode: str) -> str:
    """`` [low, high]``: the bootstrap interval of a samples/s ratio to DDP, when the results have one."""
    ci = next((r.get("x_ddp_samples_per_s_ci") for r in d["aggregate"]
               if (r["W"], r["scenario"], r["mode"]) == (w, scen, mode)), None)
    return f" [{num(ci['low'])}, {num(ci['high'])}]" if ci else ""


def _stragglers_ci_note(d: Mapping[str, Any]) -> str:
    """What the bracketed intervals are: level, seeds, resamples, and where they were recomputed from stored runs."""
    cis = [c for r in d["aggregate"] if r["W"] == 2 and (c := r.get("x_ddp_samples_per_s_ci"))]
    if not cis:
        return ""
    n = len(cis[0]["seeds"])
    rec = next((x for x in (d.get("provenance") or {}).get("recomputed", []) if x.get("what") == "x_ddp_samples_per_s_ci"),
               None)
    return (f" In brackets: the {cis[0]['level']:.0%} paired bootstrap interval of the ratio over the {n} seeds (each run "
            f"paired with the DDP run of its seed; {cis[0]['resamples']} resamples; with {n} seeds a resample is one of "
            f"{math.comb(2 * n - 1, n)} multisets of seeds, so the interval is coarse)."
            + (f" The intervals were computed from the stored per-seed runs by `{rec['command']}` on "
               f"{str(rec['date'])[:10]}, without training again." if rec else ""))


def _stragglers_sync_prediction(d: Mapping[str, Any]) -> str:
    """At W = 2: the synchronous samples/s predicted from DropCompute's tau = inf steps, against the
    never-dropping control (the same code path) and against DDP."""
    by = {(r["scenario"], r["mode"]): r for r in d["aggregate"] if r["W"] == 2}
    parts = []
    for scen, what in (("ln0.5", "lognormal CV 0.5"), ("slow", "a slow rank")):
        ddp, ctl = by.get((scen, "ddp")), by.get((scen, "dropcompute-inf"))
        if ddp and ctl and ddp.get("pred_samples_per_s") and ctl.get("samples_per_s") and ddp.get("samples_per_s"):
            p = ddp["pred_samples_per_s"]
            parts.append(f"with {what} the prediction was {num(p / ctl['samples_per_s'])}x the control's measured "
                         f"samples/s and {num(p / ddp['samples_per_s'])}x DDP's")
    if not parts:
        return ""
    return (" The synchronous prediction is made from DropCompute's recorded tau = inf steps, i.e. the control's "
            "code path: " + "; ".join(parts) + ".")


def _stragglers_control(d: Mapping[str, Any], w: Any) -> str:
    """The never-dropping control (``dropcompute-inf``) against DDP and DropCompute at W = ``w``, if run."""
    by = {(r["scenario"], r["mode"]): r for r in d["aggregate"] if r["W"] == w}
    parts = []
    for scen, what in (("ln0.5", "lognormal CV 0.5"), ("slow", "a slow rank")):
        ctl, dc = by.get((scen, "dropcompute-inf")), by.get((scen, "dropcompute"))
        if ctl and dc and ctl.get("samples_per_s") and dc.get("samples_per_s"):
            parts.append(f"with {what}, the control reached {num(ctl.get('x_ddp_samples_per_s'))}x"
                         f"{_ci(d, w, scen, 'dropcompute-inf')} DDP's samples/s, "
                         f"so dropping itself was worth {num(dc['samples_per_s'] / ctl['samples_per_s'])}x")
    return (" DropCompute's code path with tau = inf (never drops): " + "; ".join(parts) + ".") if parts else ""


def features(d: Mapping[str, Any]) -> str:
    """fbank extraction speed: x real time, per core (wall) and per CPU second."""
    rows = [[r["task"], r["jobs"], num(r["x_realtime"], "{:.0f}"), num(r["x_realtime_per_core_wall"], "{:.0f}"),
             num(r["x_realtime_per_cpu_second"], "{:.0f}")] for r in d["results"]]
    s = d.get("settings", {})
    return (md_table(["task", "jobs", "x real time", "x RT per core (wall)", "x RT per CPU second"], rows)
            + f"\n\n{num(s.get('seconds'), '{:.0f}')} s of audio in {num(s.get('utt_seconds'), '{:.0f}')} s "
              f"utterances, best of {s.get('repeats', '-')}; goal {num(d.get('goal_x_realtime_per_core'), '{:.0f}')}x "
              "real time per core.")


def alignment(d: Mapping[str, Any]) -> str:
    """MuST-C multi-way alignment speed."""
    s = d["seconds"]
    rows = [[d["segments"], d["pairs"], num(s["read"]), num(s["align"]), num(s["report"]),
             num(s["read_align_report"]), num(d["budget_s"], "{:.0f}")]]
    return md_table(["segments", "pairs", "read s", "align s", "report s", "total s", "goal s"], rows)


def streaming_growth(d: Mapping[str, Any]) -> str:
    """ms per 320 ms segment as the stream grows, per variant, with max/min from 5 s."""
    g = d["growth"]
    names = {"incremental": "incremental, preallocated KV buffers (default)",
             "incremental_cat": "incremental, `torch.cat` caches",
             "incremental_left": f"incremental, `encoder_left_chunks={g.get('left_chunks')}`",
             "reference": "reference: fresh stream every 5 s (constant cost)",
             "reencode": "re-encoding the prefix"}
    buckets = g["incremental"]["wall"]["buckets"]
    head = ["variant", *[f"{b['from_s']:.0f}-{b['to_s']:.0f} s" for b in buckets], "max/min from 5 s"]
    rows = []
    for key, label in names.items():
        if key not in g:
            continue
        w = g[key]["wall"]
        cells = [num(b["ms_per_segment"], "{:.1f}") for b in w["buckets"]]
        cells += [""] * (len(buckets) - len(cells))
        rows.append([label, *cells, num(w.get("max_over_min_from_5s"))])
    return md_table(head, rows)


def streaming_summary(d: Mapping[str, Any]) -> str:
    """RTF, per-segment cost, joint vs single, incremental vs re-encoding."""
    r = d["rtf_by_num_langs"]
    j, inc = d["joint_vs_single"], d["incremental_vs_reencode"]
    rows = [
        ["RTF, 1 / 4 / 8 target languages jointly", " / ".join(num(r[n]["rtf"], "{:.3f}") for n in ("1", "4", "8")), ""],
        ["ms per 320 ms segment, 4 languages (mean, p90)",
         f"{num(r['4']['ms_per_segment_mean'], '{:.1f}')}, {num(r['4']['ms_per_segment_p90'], '{:.1f}')}", ""],
        ["AL / computation-aware AL, 4 languages (ms)", f"{num(r['4']['AL'], '{:.0f}')} / {num(r['4']['AL_CA'], '{:.0f}')}", ""],
        ["RTF 8 languages / 1 language", num(d.get("joint8_over_joint1_rtf")), "<= 3"],
        ["joint 4 languages / 4 single-language runs", num(j["ratio"]), j.get("goal", "")],
        [f"re-encoding / incremental, {num(inc['seconds'], '{:.0f}')} s utterance", num(inc["speedup"], "{:.1f}") + "x",
         inc.get("goal", "")],
    ]
    for key, label in (("incremental", "unlimited history"), ("incremental_left", "bounded left context")):
        if key in d["growth"]:
            rows.append([f"per-segment cost max/min from 5 s, {label}",
                         num(d["growth"][key]["wall"].get("max_over_min_from_5s")), "<= 1.2"])
    c = d["config"]
    return (md_table(["measure", "value", "goal"], rows)
            + f"\n\n`{c['size']}` {c['arch']} model ({params_m(c.get('params'))} parameters, untrained, forced output "
              f"length), wait-{c['waitk']}, {num(c['segment_ms'], '{:.0f}')} ms segments, {c['threads']} thread(s).")


def train(d: Mapping[str, Any]) -> str:
    """Training throughput and MFU per size, threads and precision."""
    rows = [[r["size"], params_m(r["params"]), r["threads"], r.get("precision", "fp32"), num(r["s_per_update"]),
             num(r["frames_per_s"], "{:.0f}"), num(r["tokens_per_s"], "{:.0f}"), num(r["model_gflop_per_update"], "{:.1f}"),
             num(r["achieved_gflops"], "{:.1f}"), num(r["peak_gflops"], "{:.1f}"), (num(100 * r["mfu"], "{:.1f}") + "%" if r.get("mfu") is not None else "BUG (>100%)"),
             num(r.get("peak_rss_mb"), "{:.0f}")] for r in d["results"]]
    return md_table(["size", "params", "threads", "precision", "s/update", "frames/s", "target tokens/s",
                     "GFLOP/update (fwd+bwd)", "achieved GFLOP/s", "peak GFLOP/s (same dtype)", "MFU", "peak RSS MiB"],
                    rows)


def train_compile(d: Mapping[str, Any]) -> str:
    """``bench/bench_train.py --compile false true blocks``: per (size, threads) the eager row and each compiled
    row, with the graphs compiled and the speed-up over eager in the same run."""
    eager = {(r["size"], r["threads"], r["precision"]): r["s_per_update"] for r in d["results"] if r["compile"] == "false"}
    rows = []
    for r in d["results"]:
        e = eager.get((r["size"], r["threads"], r["precision"]))
        rows.append([r["size"], r["threads"], r["precision"], f"`{r['compile']}`", r.get("compile_in_effect", "-"),
                     r.get("compile_graphs", "-"), num(r["s_per_update"]), num(r["frames_per_s"], "{:.0f}"),
                     num(r.get("padding_pct"), "{:.1f}"),
                     (num(100 * r["mfu"], "{:.1f}") + "%") if r.get("mfu") is not None else "-",
                     (num(e / r["s_per_update"]) + "x") if e else "-"])
    m = d.get("meta", {})
    batches = (f"real batches of `{m['data']}`" if m.get("data") else
               f"synthetic batches of ~{m.get('frames_per_batch')} frames ({m.get('utt_frames')}-frame utterances)")
    return (md_table(["size", "threads", "precision", "compile", "in effect", "graphs", "s/update", "frames/s",
                      "padding %", "MFU", "speed-up over eager"], rows)
            + f"\n\n{batches}; timed updates after the untimed warm-up (a graph first met in the timed updates "
              f"is compiled inside them).")


def train_quick(d: Mapping[str, Any]) -> str:
    """Quick training throughput (frames/s, s/update)."""
    rows = [[r["size"], params_m(r["params"]), num(r["frames_per_s"], "{:,.0f}"),
             num(r["seconds"] / r["updates"]), r["batch_frames"]] for r in d["results"]]
    return md_table(["size", "parameters", "frames/s (10 ms frames)", "s/update", "frames/update"], rows)


def vs_fairseq(d: Mapping[str, Any]) -> str:
    """mmst vs fairseq ``s2t_transformer_s``: throughput ratios and dev loss at equal training time."""
    by = d.get("by_precision") or {d.get("headline_precision", "fp32"): d}
    rows = []
    for prec, b in by.items():
        e = b.get("equal_wall") or {}
        after = b.get("dev_loss_after_updates") or [None]
        fs_after = d.get("fairseq_dev_loss_after_updates")
        fs_after = fs_after[-1] if isinstance(fs_after, list) else fs_after
        rows.append([prec, " / ".join(num(b.get(k)) for k in ("ratio_min", "ratio_median", "ratio_max")),
                     " / ".join(num(b.get(k)) for k in ("cpu_ratio_min", "cpu_ratio_median", "cpu_ratio_max")),
                     f"{num(after[-1], '{:.3f}')} / {num(fs_after, '{:.3f}')}",
                     f"{num(e.get('ours_dev_loss'), '{:.3f}')} ({e.get('ours_updates', '-')} updates) / "
                     f"{num(e.get('fairseq_dev_loss'), '{:.3f}')} ({e.get('fairseq_updates', '-')} updates)"])
    c = d["config"]
    return (md_table(["ours", "frames/s ratio ours/fairseq, min / median / max", "per CPU second",
                      f"dev loss after {c['updates']} updates, ours / fairseq",
                      "dev loss at equal training time, ours / fairseq"], rows)
            + f"\n\n{c['pairs']} rounds, {c['updates']} updates each, `--max-tokens {c['max_tokens']}`, "
              f"{c['threads']} thread(s), {params_m(d['params']['ours'])} parameters both.")


def vs_fairseq_summary(d: Mapping[str, Any]) -> str:
    """The like-for-like summary of ``bench/bench_vs_fairseq.py``: ratios, MFU and 2-thread speed-up of ``s``
    (measured in the same run), goals, and the dev loss at equal updates beside the loss at equal time."""
    s = d["summary"]
    g, met = s["goals"], s["met"]

    def yes(x: bool | None) -> str:
        return "-" if x is None else ("met" if x else "missed")

    pct = "{:.1%}"
    comp = ("same as fp32: `compile` is off by default" if not s.get("compiled_measured")
            and s.get("ratio_compiled_median") is not None else "")
    rows = [["throughput ratio ours fp32 / fairseq, median", num(s["ratio_fp32_median"]), g["ratio"],
             yes(met["ratio"])],
            ["throughput ratio ours compiled / fairseq, median" + (f" ({comp})" if comp else ""),
             num(s["ratio_compiled_median"]), g["ratio"], ""],
            ["throughput ratio ours bf16 / fairseq fp32, median", num(s.get("ratio_bf16_median")), "", ""],
            ["MFU of `s`, 1 thread", num(s["mfu_s_1t"], pct), "", ""],
            ["MFU of `s`, 2 threads", num(s["mfu_s_2t"], pct), g["mfu_s_2t"].replace("0.5", "50%"),
             yes(met["mfu_s_2t"])],
            ["speed-up of `s`, 2 threads over 1", num(s["speedup_2t_over_1t_s"]), "", ""]]
    eu, et = s["dev_loss_equal_updates"], s["dev_loss_equal_time"]
    loss = md_table(["dev loss (nats per token)", "ours fp32", "fairseq"],
                    [[f"after {eu['updates']} updates (median of the pairs)", num(eu.get("ours_fp32"), "{:.3f}"),
                      num(eu.get("fairseq"), "{:.3f}")],
                     [f"at equal training time ({num(et.get('cpu_seconds'), '{:.0f}')} CPU s)",
                      f"{num(et.get('ours_fp32'), '{:.3f}')} ({et.get('ours_fp32_updates', '-')} updates)",
                      f"{num(et.get('fairseq'), '{:.3f}')} ({et.get('fairseq_updates', '-')} updates)"]])
    rows_s = {r["threads"]: r for r in d.get("train_s", [])}
    how = ""
    if rows_s:
        r = next(iter(rows_s.values()))
        how = (f" MFU and speed-up: `bench/bench_train.py` rows of the `{r['size']}` {r['arch']} model, {r['langs']} "
               f"languages, {r['batch_frames']} frames per batch, fp32, "
               + ", ".join(f"{t} thread(s) {num(x['s_per_update'])} s/update" for t, x in rows_s.items()) + ".")
    return md_table(["measure", "value", "goal", "met"], rows) + "\n\n" + loss + ("\n\n" + how.strip() if how else "")


def vs_fairseq_seeds(d: Mapping[str, Any]) -> str:
    """``bench_vs_fairseq.py --dev-seeds``: dev loss of both toolkits after the same updates, seed by seed."""
    rows = [[r["seed"], num(r["ours_fp32"], "{:.3f}"), num(r["fairseq"], "{:.3f}"),
             num(r["ours_fp32"] - r["fairseq"], "{:+.3f}")] for r in d["rows"]]
    s = d["summary"]
    rows.append(["mean", num(s["ours_fp32"]["mean"], "{:.3f}"), num(s["fairseq"]["mean"], "{:.3f}"),
                 num(s["ours_minus_fairseq"]["mean"], "{:+.3f}")])
    c = d["config"]
    return (md_table(["seed", "ours fp32", "fairseq", "ours - fairseq"], rows)
            + f"\n\nDev loss (nats per token) after {c['updates']} updates of `--max-tokens {c['max_tokens']}`, "
              f"dropouts matched (`--dropout-match {c['dropout_match']}`). Largest range of one toolkit over the seeds: "
              f"{num(s['spread_over_seeds'], '{:.3f}')}.")


def _per_update(r: Mapping[str, Any], ms: float) -> float:
    return ms / max(r["profile"]["updates"], 1)


def train_profile(d: Mapping[str, Any]) -> str:
    """``bench/bench_train.py --profile``: per row, s/update and the shares of the profiled self time."""
    cats = ("matmul", "elementwise", "loss", "optimizer", "data")
    rows = []
    for r in d["results"]:
        if "profile" not in r:
            continue
        pr = r["profile"]
        rows.append([r["size"], r["threads"], r.get("precision", "fp32"), num(r["s_per_update"]),
                     num(100 * r["mfu"], "{:.1f}") + "%" if r.get("mfu") is not None else "-",
                     num(_per_update(r, pr["total_ms"]), "{:.0f}")]
                    + [num(100 * pr["shares"][c], "{:.1f}") + "%" for c in cats])
    m = d.get("meta") or {}
    n = next((r["profile"]["updates"] for r in d["results"] if "profile" in r), "-")
    return (md_table(["size", "threads", "precision", "s/update (unprofiled)", "MFU", "profiled ms/update", *cats], rows)
            + f"\n\n{n} profiled updates per row (CPU self time of each op; data: "
              f"{next((r['profile']['data_source'] for r in d['results'] if 'profile' in r), '-')}); "
              f"{m.get('frames_per_batch', '-')} frames per batch; load average {num(m.get('loadavg_1min'), '{:.1f}')} "
              f"on {m.get('cpu_count', '-')} CPUs when the run ended.")


def train_profile_ops(d: Mapping[str, Any], top: int = 10) -> str:
    """The ``top`` ops by self time of every profiled row, side by side: ms per update and share."""
    prof = [r for r in d["results"] if "profile" in r]
    one = {r["size"]: r for r in prof if r["threads"] == 1}
    blocks = []
    for r in prof:
        pr = r["profile"]
        total = pr["total_ms"] or 1.0
        base = one.get(r["size"]) if r["threads"] > 1 else None
        ref = {(op["name"], op["category"]): _per_update(base, op["self_ms"]) for op in base["profile"]["top_ops"]} if base else {}
        rows = []
        for op in pr["top_ops"][:top]:
            ms = _per_update(r, op["self_ms"])
            rows.append([f"`{op['name']}`", num(ms, "{:.1f}"), num(100 * op["self_ms"] / total, "{:.1f}") + "%",
                         op["category"], num(op["calls"] / max(pr["updates"], 1), "{:.0f}")]
                        + ([num(ref[(op["name"], op["category"])] / ms if ms and (op["name"], op["category"]) in ref
                                else None)] if base else []))
        head = ["op", "self ms/update", "share", "category", "calls/update"] + (["speed-up over 1 thread"] if base else [])
        blocks.append(f"`{r['size']}`, {r['threads']} thread(s):\n\n" + md_table(head, rows))
    return "\n\n".join(blocks)


def train_profile_scaling(d: Mapping[str, Any]) -> str:
    """Per size and category: profiled ms per update at 1 and at 2 threads and their ratio (how each part
    of the step scales with the second thread)."""
    cats = ("matmul", "elementwise", "loss", "optimizer", "data")
    by = {(r["size"], r["threads"]): r for r in d["results"] if "profile" in r}
    rows = []
    for size in dict.fromkeys(s for s, _ in by):
        one, two = by.get((size, 1)), by.get((size, 2))
        if not one or not two:
            continue
        for c in (*cats, "total"):
            a, b = (_per_update(r, r["profile"]["total_ms"] * (1.0 if c == "total" else r["profile"]["shares"][c]))
                    for r in (one, two))
            rows.append([size, c, num(a, "{:.0f}"), num(b, "{:.0f}"), num(a / b if b else None)])
        if "wall_ms" in one["profile"] and "wall_ms" in two["profile"]:
            a, b = (_per_update(r, r["profile"]["wall_ms"] - r["profile"]["total_ms"]) for r in (one, two))
            rows.insert(len(rows) - 1, [size, "outside ops (Python, autograd, profiler)", num(a, "{:.0f}"),
                                        num(b, "{:.0f}"), num(a / b if b > 0 else None)])
            a, b = (_per_update(r, r["profile"]["wall_ms"]) for r in (one, two))
            rows.append([size, "wall (profiled)", num(a, "{:.0f}"), num(b, "{:.0f}"), num(a / b if b else None)])
    return md_table(["size", "part of the step", "ms/update, 1 thread", "ms/update, 2 threads", "speed-up"], rows)


def train_threads(d: Mapping[str, Any]) -> str:
    """``bench/bench_threads.py``: s/update at 2 threads under each OpenMP setting and the speed-up over 1 thread."""
    rows = []
    for size, s in d["summary"].items():
        for n, t in s["s_per_update_2t"].items():
            env = next((r["env"] for r in d["rows"] if r["setting"] == n), {})
            rows.append([size, n, " ".join(f"`{k}={v}`" for k, v in env.items()), num(s["s_per_update_1t"]),
                         num(t), num(s["speedup_2t_over_1t"][n]),
                         num(100 * s["mfu_2t"][n], "{:.1f}") + "%" if s["mfu_2t"].get(n) is not None else "-"])
    c = d["config"]
    peaks = "; ".join(f"`{size}`: {num(s['peak_speedup_2t_over_1t'])}" for size, s in d["summary"].items())
    return (md_table(["size", "setting", "environment", "s/update 1 thread", "s/update 2 threads", "speed-up 2t / 1t",
                      "MFU 2 threads"], rows)
            + f"\n\nMedians of {c['rounds']} rounds (order alternating), {c['frames']} frames per batch, "
              f"{c['updates']} timed updates per row; load average {num(c.get('loadavg_1min'), '{:.1f}')} on "
              f"{c.get('cpus', '-')} CPUs when the run ended. The 2048^2 fp32 matmul peak scales {peaks} from 1 to 2 "
              f"threads.")


def streaming_policies(d: Mapping[str, Any]) -> str:
    """Per-policy streaming cost (``bench/bench_streaming.py --policies-only``): ms per segment and RTF."""
    pr = d["policies"]
    rows = [[r["policy"], str(r["beam"]), num(r["ms_per_segment_mean"], "{:.1f}"), num(r["ms_per_segment_p90"], "{:.1f}"),
             num(r["rtf"], "{:.3f}")] for r in pr["rows"].values()]
    return (md_table(["policy", "beam", f"ms per {num(pr.get('segment_ms'), '{:.0f}')} ms segment", "p90", "RTF"], rows)
            + f"\n\n{pr['size']} model, untrained, forced output length, {len(pr['langs'])} languages jointly, "
              f"{pr['threads']} thread(s); load average {num(pr.get('loadavg_1m_after'), '{:.1f}')} on "
              f"{pr.get('cpus')} CPUs while it ran. AlignAtt / wait-k per segment: "
              f"{num(pr['alignatt_over_waitk_ms_per_segment'])} (target <= 1.3); LA with beam 4: RTF "
              f"{num(pr['la_beam4_rtf'], '{:.3f}')} (target < 1).")


def streaming_hf(d: Mapping[str, Any]) -> str:
    """Streaming over a Hugging Face encoder (``bench/bench_streaming.py --hf-only``): ms per chunk by position."""
    hr = d["hf"]
    hf, xs = hr["rows"]["hf"], hr["rows"]["xs_incremental"]
    rows = [[f"{a['from_s']:.0f}-{a['to_s']:.0f} s", num(a["ms_per_segment"], "{:.1f}"), num(b["ms_per_segment"], "{:.1f}")]
            for a, b in zip(hf["buckets"], xs["buckets"])]
    return (md_table(["position in the segment", f"{hr['encoder']} (re-encoded), ms per chunk",
                      "xs chunk-causal (incremental), ms per chunk"], rows)
            + f"\n\nThread-CPU ms per {num(hr['segment_ms'], '{:.0f}')} ms chunk over one {num(hr['seconds'], '{:.0f}')} s "
              f"segment, {len(hr['langs'])} languages jointly, wait-k, {hr['threads']} thread(s), untrained models "
              f"(random weights, forced output length). Last bucket / first: {num(hf['last_over_first'], '{:.1f}')}x "
              f"for the re-encoded encoder ({hf['first_ms']:.1f} -> {hf['last_ms']:.1f} ms), "
              f"{num(xs['last_over_first'], '{:.1f}')}x for the incremental one. Encoder parameters: "
              f"{hr['hf_params'] / 1e6:.1f}M ({hr['encoder']}) and {hr['xs_params'] / 1e6:.1f}M (xs).")


def int8_table(d: Mapping[str, Any]) -> str:
    """``bench/bench_int8.py``: fp32 against dynamic int8 linear layers, streaming cost and BLEU, same run."""
    c, rows, sm = d["config"], d["rows"], d["summary"]
    langs = c["tgt_langs"]
    body = [[prec, num(r["rtf"], "{:.4f}"), num(r["ms_per_segment"], "{:.1f}")]
            + [num(r["bleu"][lang], "{:.2f}") for lang in langs] for prec, r in rows.items()]
    k = c["waitk_lagging"]
    return (md_table(["precision", "RTF", "ms per segment"] + [f"BLEU {lang}" for lang in langs], body)
            + f"\n\nint8 / fp32 RTF: {num(sm['int8_over_fp32_rtf'])} (target <= 0.7: "
              f"{goal_met(sm['int8_over_fp32_rtf'], 0.7)}); BLEU change at k = {k}: "
              f"{num(sm.get(f'int8_bleu_change_k{k}'), '{:+.2f}')} (target |d| <= 0.3); int8 words equal to fp32's: "
              + ", ".join(f"{lang} {num(v, '{:.3f}')}" for lang, v in d["agreement"].items())
              + f". {c['n_utterances']} {c['split']} utterances, wait-{k}, {c['threads']} thread(s), fastest of "
                f"{c['reps']} alternating repetitions."
            + int8_profile(d))


def int8_profile(d: Mapping[str, Any], top: int = 8) -> str:
    """The ``linear`` section of ``int8.json`` (absent from older runs: then nothing): the linear layers' share
    of the fp32 cost, the bounds it sets, and the ``top`` shapes by fp32 time."""
    lin = d.get("linear")
    if not lin:
        return ""
    body = [[str(x["rows"]), f"{x['in_features']} x {x['out_features']}", str(x["calls"]), num(x["fp32_us"], "{:.1f}"),
             num(x["int8_us"], "{:.1f}"), num(x["int_mm_us"], "{:.1f}"), num(x["int8_over_fp32"], "{:.1f}")]
            for x in lin["shapes"][:top]]
    return (f"\n\nLinear layers in the fp32 pass: {lin['calls']} calls, priced at their one-shape timings "
            f"{num(lin['fp32_linear_s'], '{:.1f}')} s of {num(lin['fp32_compute_s'], '{:.1f}')} s "
            f"({pct(lin['linear_share'])}); so int8 linear layers that cost nothing would give an int8 / fp32 RTF "
            f"of {num(lin['int8_rtf_bound_free_linear'])} at best, and at the int8 layer's timings the ratio "
            f"should be {num(lin['int8_over_fp32_rtf_predicted'])} (measured: "
            f"{num(d['summary']['int8_over_fp32_rtf'])}). The {min(top, len(lin['shapes']))} shapes with the most "
            f"fp32 time (of {len(lin['shapes'])}), microseconds per call (median):\n\n"
            + md_table(["rows R", "in x out", "calls", "fp32 `F.linear`", "int8 layer", "`torch._int_mm` alone",
                        "int8 / fp32"], body))


def backbones(d: Mapping[str, Any]) -> str:
    """``recipes/synthetic/run_backbones.sh`` (``mmst-backbones``): per system, BLEU at one wait-k on both test
    sets (averaged over the languages) and their mean, AL on the seen set (with LAAL, AL_CA and LAAL_CA when the
    results have them), then the summary against its goal, named for what it compares: an ASR-then-ST
    curriculum against ST alone, at equal updates, over the seeds the results hold."""
    k = str(d["k"]).lstrip("k")
    seen, unseen = d["splits"]
    desc = d.get("descriptions") or {}
    lat = [m for m in ("LAAL", "AL_CA", "LAAL_CA") if any(m in (r.get("seen_latency") or {}) for r in d["systems"].values())]
    body = [[f"`{name}`", num(r["seen_bleu"]["mean"]), num(r["unseen_bleu"]["mean"]), num(r["bleu"]),
             num(r["seen_al"]["mean"], "{:.0f}"),
             *(num((r.get("seen_latency") or {}).get(m, {}).get("mean"), "{:.0f}") for m in lat), desc.get(name, "")]
            for name, r in d["systems"].items()]
    s = d["summary"]
    d_pre, d_xs = s[f"pretrained_minus_scratch_bleu_k{k}"], s[f"hf_minus_xs_asr_bleu_k{k}"]
    per_lang = "; ".join(f"`{name}` " + ", ".join(f"{lang} {num(r['seen_per_lang'][lang]['mean'], '{:.1f}')}"
                                                    for lang in d["langs"]) for name, r in d["systems"].items())
    ns = sorted({len(r["seeds"].get(seen, [])) for r in d["systems"].values()})
    seeds = (f"{ns[0]} training seed" + ("" if ns[0] == 1 else "s") if len(ns) == 1
             else f"{ns[0]}-{ns[-1]} training seeds per system")
    ca = ("" if lat else f" Computation-aware AL/LAAL: not in these results (the committed run predates them; "
          f"a rerun of the recipe adds LAAL, AL_CA and LAAL_CA on {seen}).")
    return (md_table(["system", f"BLEU {seen}", f"BLEU {unseen}", "BLEU mean", f"AL {seen} (ms)",
                      *(f"{m} {seen} (ms)" for m in lat), "trained"], body)
            + f"\n\nBLEU at wait-{k}, the mean over {', '.join(d['langs'])}; {seeds}. ASR-pretrained encoder minus the "
              f"same encoder trained on ST alone, at equal updates (not equal compute): "
              f"{num(d_pre, '{:+.2f}')} BLEU (goal > 0: {'met' if s['goal_met'] else 'missed'}); ASR-pretrained "
              f"Hugging Face encoder minus the `xs` encoder with its ASR pretraining: {num(d_xs, '{:+.2f}')} BLEU "
              f"(reported)."
              + ("" if s.get("complete", True) else " Incomplete: " + ", ".join(d.get("missing", [])) + ".")
              + f" BLEU per language on {seen}: {per_lang}." + ca)


def goal_met(value: float | None, limit: float, strict: bool = False) -> str:
    """``met`` when ``value <= limit`` (``<`` with ``strict``), ``missed`` otherwise, ``-`` when not measured."""
    if value is None:
        return "-"
    return "met" if (value < limit if strict else value <= limit) else "missed"


def longform_cost(d: Mapping[str, Any]) -> str:
    """Long-form benchmark (``bench/bench_longform.py``): cost, RSS and segments by stream position, summary.

    A JSON with ``summary.vad_share_of_compute`` (written since the AlignAtt/capped rows exist) gets a
    ``met`` column, the one-push RSS and VAD-share lines and the cuts by the segment cap; an older one
    renders without them."""
    c, s, cfg = d["cost"], d["summary"], d["config"]
    rows = [[f"{num(b['from_min'], '{:g}')}-{num(b['to_min'], '{:g}')}",
             num(b["ms_per_chunk_cpu"]["mean"], "{:.1f}"), num(b["ms_per_chunk_wall"]["mean"], "{:.1f}"),
             num(b["ms_per_chunk_wall"]["p90"], "{:.1f}"), num(b["peak_rss_mib"], "{:.0f}"), str(b["vad_segments"]),
             str(b["max_state_numel"])] for b in c["buckets"]]
    table = md_table(["stream position (min)", "CPU ms / chunk", "wall ms / chunk", "wall p90", "peak RSS (MiB)",
                      "VAD segments", "largest segment cache (elements)"], rows)
    new = "vad_share_of_compute" in s
    measures: list[list[Any]] = [
        ["CPU ms per chunk, last bucket / first bucket", num(s["cost_ratio_60min_vs_5min"]), "<= 1.2",
         goal_met(s["cost_ratio_60min_vs_5min"], 1.2)],
        ["wall ms per chunk, last bucket / first bucket", num(c["cost_ratio_wall"]), "", ""],
        ["peak RSS growth from 10 min to the end (MiB)", num(s["rss_growth_mib_10_to_60min"], "{:.1f}"), "<= 50",
         goal_met(s["rss_growth_mib_10_to_60min"], 50.0)],
    ]
    if new:
        mem = d.get("memory_one_push") or {}
        minutes = num(mem.get("minutes", cfg.get("rss_minutes")), "{:g}")
        measures.append([f"peak RSS growth, one push of a {minutes}-min talk minus "
                         f"{num(cfg['chunk_ms'], '{:.0f}')} ms pushes (MiB)",
                         num(s["rss_growth_mib_one_push_5min"], "{:.1f}"), "<= 30",
                         goal_met(s["rss_growth_mib_one_push_5min"], 30.0)])
    measures.append(["real-time factor (wall compute / audio)", num(s["rtf"], "{:.3f}"), "< 1",
                     goal_met(s["rtf"], 1.0, strict=True)])
    if "rtf_cpu" in c:
        measures.append(["real-time factor (thread CPU time / audio)", num(c["rtf_cpu"], "{:.3f}"), "", ""])
    if new:
        measures.append(["VAD share of the long-form compute", pct(s["vad_share_of_compute"]), "", ""])
    summ = (md_table(["measure", "value", "goal", "met"], measures) if new
            else md_table(["measure", "value", "goal"], [m[:3] for m in measures]))
    cut = f" ({c['n_forced_cuts']} cut by the segment cap)" if "n_forced_cuts" in c else ""
    note = (d.get("provenance") or {}).get("note")
    return (summ + "\n\n" + table + f"\n\n{num(cfg['minutes'], '{:.0f}')}-minute talk of {cfg['split']} utterances "
            f"(pauses {cfg['pause_ms']} ms), {len(cfg['tgt_langs'])} languages jointly ({', '.join(cfg['tgt_langs'])}), "
            f"{cfg['policy']}, {num(cfg['chunk_ms'], '{:.0f}')} ms chunks, {cfg['threads']} thread(s), "
            f"{params_m(cfg.get('params'))} parameters; {c['n_segments']} VAD segments{cut}, {c['n_words']} words."
            + (f" {note}." if note else ""))


def pct(x: float | None) -> str:
    """A fraction as a percentage with one decimal (``0.123`` -> ``12.3%``); ``-`` for ``None``."""
    return "-" if x is None else f"{100.0 * x:.1f}%"


def pause_range(ms: str) -> str:
    """``"300,800"`` -> ``300-800``, ``"100,100"`` -> ``100`` (the bench's ``--pause-ms`` as a range)."""
    lo, _, hi = ms.partition(",")
    return lo if not hi or hi == lo else f"{lo}-{hi}"


def longform_rows(d: Mapping[str, Any]) -> str:
    """The long-form benchmark's main run beside its AlignAtt and capped-segment rows (``rows``): RTF wall
    and CPU, segments, cuts by the segment cap, the VAD's share of the compute; then the one-large-push
    memory check (``memory_one_push``)."""
    rows, cfg, mem = d.get("rows") or [], d["config"], d.get("memory_one_push")
    if not rows and not mem:
        return ("This run recorded neither the AlignAtt and capped rows nor the one-push memory check "
                "(`bench/bench_longform.py --row-minutes M --rss-minutes M` writes them).")
    c = d["cost"]
    main = {"name": "main", "policy": cfg["policy"], "minutes": cfg["minutes"], "pause_ms": cfg["pause_ms"],
            "max_segment_s": None, **c}
    label = {"main": "main run", "alignatt": "AlignAtt", "capped": "capped segments"}
    out = []
    if rows:
        out.append(md_table(
            ["run", "policy", "talk (min)", "pauses (ms)", "RTF wall", "RTF CPU", "segments", "cut by the cap",
             "VAD share"],
            [[label.get(r["name"], r["name"]), r["policy"], num(r["minutes"], "{:g}"), pause_range(r["pause_ms"]),
              num(r["rtf"], "{:.3f}"), num(r.get("rtf_cpu"), "{:.3f}"), r["n_segments"],
              num(r.get("n_forced_cuts"), "{}"), pct(r.get("vad_share_of_compute"))] for r in [main, *rows]]))
        capped = [r for r in rows if r["name"] == "capped"]
        if capped:
            r = capped[0]
            silence = r.get("vad_min_silence_ms", cfg["vad_min_silence_ms"])
            out.append(f"The capped run's pauses are shorter than the VAD's segment-ending silence "
                       f"({num(silence, '{:.0f}')} ms), so the VAD ends its segments only at the "
                       f"{num(r['max_segment_s'], '{:g}')} s cap.")
    if mem:
        out.append(f"One push of a whole {num(mem['minutes'], '{:g}')}-minute talk: peak RSS growth "
                   f"{num(mem['rss_growth_mib_one_push'], '{:.1f}')} MiB, against "
                   f"{num(mem['rss_growth_mib_chunk_pushes'], '{:.1f}')} MiB in {num(cfg['chunk_ms'], '{:.0f}')} ms "
                   f"pushes: {num(mem['one_push_minus_chunk_pushes_mib'], '{:.1f}')} MiB more (goal <= 30 MiB: "
                   f"{goal_met(mem['one_push_minus_chunk_pushes_mib'], 30.0)}).")
    return "\n\n".join(out)


def continuous(d: Mapping[str, Any]) -> str:
    """Continuous speech (``bench/bench_continuous.py``): per pause range and segmentation, BLEU and untranslated
    speech share per language without and with sentence restarts; then the summary keys and their goals."""
    cfg, rows, summ = d["config"], d["rows"], d["summary"]
    langs = cfg["tgt_langs"]
    runs = [("vad", f"VAD ({num(cfg['vad_min_silence_ms'], '{:.0f}')} ms silence)"),
            ("vad_merged", f"VAD ({num(cfg.get('merged_vad_min_silence_ms'), '{:.0f}')} ms silence)"),
            ("oracle", "oracle")]
    body = []
    for r in rows:
        for key, label in runs:
            if key not in r:
                continue
            off, on = r[key], r[key + "_restart"]
            body.append([f"{num(r['pause_ms'][0], '{:g}')}-{num(r['pause_ms'][1], '{:g}')}", label,
                         f"{off['n_segments']}",
                         *[f"{num(off['per_lang'][lang]['BLEU'])} / {num(on['per_lang'][lang]['BLEU'])}" for lang in langs],
                         *[f"{pct(off['per_lang'][lang]['untranslated_speech_share'])} / "
                           f"{pct(on['per_lang'][lang]['untranslated_speech_share'])}" for lang in langs],
                         f"{on['n_restarts']}"])
    out = [md_table(["pauses (ms)", "segmentation", "segments", *[f"BLEU {lang}" for lang in langs],
                     *[f"untranslated {lang}" for lang in langs], "restarts"], body),
           f"Each cell: without / with sentence restarts. {cfg['utterances']} {cfg['split']} utterances per talk, "
           f"{cfg['policy']}, {num(cfg['source_segment_size_ms'], '{:.0f}')} ms chunks, segments of at most "
           f"{num(cfg['max_segment_s'], '{:g}')} s."]
    goals = summ.get("goals", {})
    out.append(md_table(["measure (best VAD system: " + summ["system"] + ")", "value", "goal", "met"],
                        [[k, num(summ.get(k), "{:.3f}" if "ratio" in k or "share" in k else "{:.0f}"), g["goal"],
                          "-" if g["met"] is None else ("met" if g["met"] else "missed")] for k, g in goals.items()]))
    return "\n\n".join(out)


def _crosscheck_foot(x: Mapping[str, Any], cap: bool) -> str:
    vad_cut = f" ({x['vad_forced_cuts']} cut by the {num(x['max_segment_s'], '{:g}')} s cap)" \
        if cap or x.get("vad_forced_cuts") else ""
    return (f"{x['n_utterances']} utterances ({num(x['audio_s'], '{:.0f}')} s as one talk"
            + (f", pauses {x['pause_ms']} ms" if cap else "") + f"); "
            f"{x['vad_segments']} VAD segments{vad_cut}, {x['oracle_segments']} oracle segments.")


def longform_crosscheck(d: Mapping[str, Any]) -> str:
    """Segmented vs long-form (VAD, oracle segmentation) BLEU and LAAL/StreamLAAL per language; with
    ``crosscheck_capped``, a second table: the talk whose VAD segments are cut by the cap vs the oracle."""
    x = d["crosscheck"]
    rows = []
    for lang, v in x["per_lang"].items():
        rows.append([lang, num(v["segmented"]["BLEU"]), num(v["vad"]["BLEU"]), num(v["oracle"]["BLEU"]),
                     num(v["segmented"]["LAAL"], "{:.0f}"), num(v["vad"]["StreamLAAL"], "{:.0f}"),
                     num(v["oracle"]["StreamLAAL"], "{:.0f}")])
    out = (md_table(["lang", "BLEU segmented", "BLEU long-form (VAD)", "BLEU long-form (oracle)",
                     "LAAL segmented (ms)", "StreamLAAL (VAD)", "StreamLAAL (oracle)"], rows)
           + "\n\n" + _crosscheck_foot(x, cap=False))
    xc = d.get("crosscheck_capped")
    if not xc:
        return out
    rows = [[lang, num(v["vad"]["BLEU"]), num(v["oracle"]["BLEU"]), num(v["vad"]["StreamLAAL"], "{:.0f}"),
             num(v["oracle"]["StreamLAAL"], "{:.0f}")] for lang, v in xc["per_lang"].items()]
    silence = xc.get("vad_min_silence_ms")
    silence_text = f" ({num(silence, '{:.0f}')} ms)" if silence is not None else ""
    return (out + f"\n\nThe same utterances with pauses shorter than the VAD's segment-ending silence{silence_text}: "
            "the VAD's segments end at the cap, not at sentence ends.\n\n"
            + md_table(["lang", "BLEU (VAD, capped)", "BLEU (oracle)", "StreamLAAL (VAD, capped)",
                        "StreamLAAL (oracle)"], rows)
            + "\n\n" + _crosscheck_foot(xc, cap=True))


def augment_report(d: Mapping[str, Any]) -> str:
    """The augmentation experiment (``eval/unseen_gap.py``): seen vs unseen BLEU/AL per system, the gap."""
    from mmst.evaluation.unseen_gap import render_markdown

    rep = {k: v for k, v in d.items() if k != "provenance"}
    extra = {"loader wait %": d["loader_wait_pct"]} if d.get("loader_wait_pct") else None
    return render_markdown(rep, "", d.get("descriptions"), extra).split("\n", 2)[2].strip("\n")


def augment_cost(d: Mapping[str, Any]) -> str:
    """SpecAugment and on-the-fly speed perturbation cost per batch (``bench/bench_train.py`` JSON)."""
    from mmst.evaluation.unseen_gap import cost_table

    return cost_table(d).strip("\n")


def augment_prep(d: Mapping[str, Any]) -> str:
    """Prep-time cost of the speed-perturbed copies (``speed_perturb_<split>.json``)."""
    from mmst.evaluation.unseen_gap import prep_line

    return prep_line(d).strip("\n")


def serve_table(d: Mapping[str, Any]) -> str:
    """mmst-serve under load (``bench/bench_serve.py``): one row per batching mode and number of clients,
    the flood row, the summary and the goals."""
    kinds = ("VadWindows", "FrontEndFrames", "EncoderBlock", "DecoderStep")

    def per_call(r: Mapping[str, Any]) -> str:
        spc = r.get("streams_per_call") or {}
        if r["batching"] != "tick" or not spc:
            return "-"
        return " / ".join(num(spc.get(k), "{:.1f}") for k in kinds)

    def clients(r: Mapping[str, Any]) -> str:
        return f"{r['n']} + 1 flooder" if r.get("flood") else str(r["n"])

    rows = [[r["batching"], num(r.get("compute_workers"), "{:.0f}"), clients(r), f"{num(r['added_latency_ms_p50'], '{:.0f}')} / {num(r['added_latency_ms_p95'], '{:.0f}')}",
             num(r["rtf_max"], "{:.3f}"), num(r["server_cpu_pct"], "{:.0f}") + "%", num(r["cpu_s_per_audio_s"], "{:.3f}"),
             num(r.get("clients_cpu_s"), "{:.1f}"), per_call(r), num(r["peak_rss_mib"], "{:.0f}"),
             num(r["words_per_s"], "{:.1f}"), "yes" if r["realtime"] else "no"]
            for r in d["rows"].values()]
    s, c = d["summary"], d["config"]
    goals = d.get("goals") or {}
    goal_rows = [[f"`{k}`", g["target"], "-" if g["value"] is None else num(g["value"], "{:.3g}") if isinstance(g["value"], float)
                  else str(g["value"]),
                  "met" if g["met"] else "**missed**"] for k, g in goals.items()]
    text = (md_table(["batching", "compute threads", "clients", "added latency p50 / p95 (ms)", "RTF (max client)", "server CPU",
                      "CPU s per audio s", "clients' CPU s", "streams per call (VAD / front end / encoder / decoder)",
                      "peak RSS (MiB)", "words/s", "real time"], rows)
            + f"\n\nAt 8 clients: p95 added latency {num(s['p95_added_latency_ms_8_clients'], '{:.0f}')} ms, "
              f"batched / unbatched CPU cost {num(s['batched_over_unbatched_cost_8_clients'])} "
              f"(at 16: {num(s.get('batched_over_unbatched_cost_16_clients'))}); max real-time clients "
              f"(RTF < 1 and p95 < {num(c['realtime_p95_ms'], '{:.0f}')} ms): {s['max_realtime_clients']}; "
              f"p95 added latency of {c.get('flood_clients', 8)} real-time clients next to a flooder: "
              f"{num(s.get('flood_p95_added_latency_ms'), '{:.0f}')} ms. "
              f"{num(c['seconds_per_client'], '{:.0f}')} s of real-time audio per client, {c['cpus']} CPUs"
              + (f"; {c['note']}" if c.get("note") else "") + ".")
    pairs = d.get("cost_pairs") or {}
    if pairs:
        text += (" The cost ratios are the median over paired runs alternating between a tick and an unbatched "
                 "server, both kept running (tick / unbatched CPU s per audio s per pair: "
                 + "; ".join(f"{n} clients: " + ", ".join(f"{num(p['tick'], '{:.3f}')}/{num(p['off'], '{:.3f}')} = "
                                                          f"{num(p['ratio'])}" for p in ps)
                             for n, ps in pairs.items()) + ").")
    if goal_rows:
        text += "\n\n" + md_table(["goal (2 cores, quickstart xs model)", "target", "measured", ""], goal_rows)
    return text


def serve_abuse_table(d: Mapping[str, Any]) -> str:
    """mmst-serve against abusive clients (``bench/bench_serve_abuse.py``): per abuser, how the server ended
    it, the server's RSS growth, and the real-time client next to it (words exact, client-measured latency)."""
    def ended(a: Mapping[str, Any]) -> str:
        if not a:
            return "-"
        code = a.get("server_close_code") or a.get("close_code")
        code = "/".join(map(str, code)) if isinstance(code, list) else str(code)
        if a.get("still_open_at_end"):  # closed by the server, but the client (not reading) never saw it
            return f"{code} (the client never read the close)"
        return f"{code} after {num(a.get('open_s'), '{:.1f}')} s"

    rows = [[f"`{k}`", ended(r["abuser"]), num(r["rss_growth_mib"], "{:.1f}"),
             "yes" if r["realtime_words_exact"] else "**no**",
             f"{num(r['realtime_client_p50_ms'], '{:.0f}')} / {num(r['realtime_client_p95_ms'], '{:.0f}')}"]
            for k, r in d["rows"].items()]
    c = d["config"]
    goal_rows = [[f"`{k}`", g["target"], num(g["value"], "{:.3g}") if g["value"] is not None else "-",
                  "met" if g["met"] else "**missed**"] for k, g in (d.get("goals") or {}).items()]
    text = (md_table(["abusive client", "closed by the server", "server RSS growth (MiB)",
                      "real-time client's words exact", "real-time client latency p50 / p95 (ms, client-measured)"], rows)
            + f"\n\nOne real-time client ({num(c['seconds'], '{:.0f}')} s of audio, 100 ms int16 frames) per row, "
              f"next to the abusive client; server options `{' '.join(c['server_args'])}`; {c['cpus']} CPUs"
            + (f"; {c['note']}" if c.get("note") else "") + ".")
    if goal_rows:
        text += "\n\n" + md_table(["goal (2 cores, quickstart xs model)", "target", "measured", ""], goal_rows)
    return text


#: The wall-time budget of the pytest suite of ``make test`` on 2 cores (docs/development.md).
TEST_BUDGET_S = 720


def test_durations(d: Mapping[str, Any]) -> str:
    """The slowest tests of one pytest run (``bench/bench_test_durations.py``): seconds, test id, cause."""
    rows = [[num(r["seconds"], "{:.1f}"), f"`{r['id']}`", r["cause"]] for r in d["slowest"]]
    return md_table(["seconds", "test", "what it spends them on"], rows)


def test_durations_totals(d: Mapping[str, Any]) -> str:
    """One sentence: the wall time of a pytest run against the budget, its test counts and the pytest arguments."""
    t, m = d["totals"], d["provenance"]["machine"]
    args = " ".join(d.get("pytest_args") or []) or "(none)"
    note = d["provenance"].get("note")
    verdict = "met" if t["wall_s"] <= TEST_BUDGET_S else "**missed**"
    return (f"pytest wall {t['wall_s']:.0f} s ({t['wall_s'] / 60:.1f} min; budget {TEST_BUDGET_S / 60:.0f} min: "
            f"{verdict}) on {m.get('cores')} cores "
            f"({m.get('cpu_model')}); {t['tests']} tests: {t['passed']} passed, {t['failed']} failed, "
            f"{t['skipped']} skipped; sum of the per-test seconds {t['sum_test_s']:.0f}; extra pytest arguments: "
            f"`{args}`" + (f"; {note}" if note else "") + ".")


def policies_summary(d: Mapping[str, Any], full: str) -> str:
    """The summary of a policy comparison (``mmst-policy-results``): on the offline-trained model, the
    languages where an adaptive policy beats wait-k at wait-k's own latency, per k, the range of the sweeps,
    and the best policy per language; then a link to the full tables ``full`` (its Markdown)."""
    s, langs = d["summary"], d["langs"]
    metric = s.get("metric", "AL")
    corr = s.get("correction")
    tie = (f"a win not significant after Holm's correction over the {corr['tests']} paired bootstrap tests of the "
           f"table is a tie" if corr else "a win inside the paired bootstrap interval is a tie")
    ks = list(s["langs_adaptive_beats_waitk_offline_model"])
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


@dataclass(frozen=True)
class Table:
    """A rendered table: its JSON under ``docs/results/`` and the function that formats it."""

    json: str
    render: Callable[[Mapping[str, Any]], str]
    subkey: str | None = None  # render ``data[k1][k2]..`` for subkey "k1/k2" (provenance from the top level)


TABLES: dict[str, Table] = {
    "augment": Table("augment.json", augment_report),
    "augment-cost": Table("augment_cost.json", augment_cost),
    "augment-prep": Table("augment_speed_prep.json", augment_prep),
    "quickstart": Table("quickstart.json", quickstart_sweep, "tst-COMMON"),
    "quickstart-unseen": Table("quickstart.json", quickstart_single, "tst-unseen"),
    "quickstart-stages": Table("quickstart.json", quickstart_stages),
    "quickstart-total": Table("quickstart.json", quickstart_total),
    "quickstart-curve": Table("quickstart_curve.json", quickstart_curve),
    "test-durations": Table("test_durations.json", test_durations),
    "test-durations-totals": Table("test_durations.json", test_durations_totals),
    "test-durations-before": Table("test_durations_before.json", test_durations_totals),
    "test-durations-before-slowest": Table("test_durations_before.json", test_durations),
    "offline-xs": Table("offline_xs_10min.json", offline_bleu),
    "offline-xs.tst-COMMON": Table("offline_xs_10min.json", compare_langs, "results/tst-COMMON"),
    "offline-xs.tst-unseen": Table("offline_xs_10min.json", compare_langs, "results/tst-unseen"),
    "hard-waitk": Table("hard_waitk.json", hard_waitk),
    "hard-waitk.langs": Table("hard_waitk.json", compare_langs),
    "compare-synthetic.langs": Table("compare_synthetic.json", compare_langs),
    "compare-synthetic-600.langs": Table("compare_synthetic_600.json", compare_langs),
    "compare-hard-600.langs": Table("compare_hard_600.json", compare_langs),
    "compare-synthetic": Table("compare_synthetic.json", compare_avg),
    "compare-synthetic-600": Table("compare_synthetic_600.json", compare_avg),
    "compare-hard-600": Table("compare_hard_600.json", lambda d: compare_avg(d, seeds_column=True)),
    "stragglers": Table("stragglers.json", stragglers),
    "stragglers-mmst": Table("stragglers_mmst.json", stragglers_mmst),
    "stragglers-mmst-summary": Table("stragglers_mmst.json", stragglers_mmst_summary),
    "features": Table("features.json", features),
    "alignment": Table("alignment.json", alignment),
    "streaming": Table("streaming.json", streaming_summary),
    "streaming-growth": Table("streaming.json", streaming_growth),
    "streaming-policies": Table("streaming_policies.json", streaming_policies),
    "streaming-hf": Table("streaming_hf.json", streaming_hf),
    "int8": Table("int8.json", int8_table),
    "backbones": Table("backbones.json", backbones),
    "longform": Table("longform.json", longform_cost),
    "longform-crosscheck": Table("longform.json", longform_crosscheck),
    "longform-rows": Table("longform.json", longform_rows),
    "continuous": Table("continuous.json", continuous),
    "train": Table("train.json", train),
    "train-quick": Table("train_quick.json", train_quick),
    "train-compile": Table("train_compile.json", train_compile),
    "vs-fairseq": Table("vs_fairseq.json", vs_fairseq),
    "vs-fairseq-summary": Table("vs_fairseq.json", vs_fairseq_summary),
    "vs-fairseq-seeds": Table("vs_fairseq_seeds.json", vs_fairseq_seeds),
    "vs-fairseq-own-dropouts": Table("vs_fairseq_own_dropouts.json", vs_fairseq),
    "train-profile": Table("train_profile.json", train_profile),
    "train-profile-ops": Table("train_profile.json", train_profile_ops),
    "train-profile-scaling": Table("train_profile.json", train_profile_scaling),
    "train-threads": Table("train_threads.json", train_threads),
    "train-threads-run2": Table("train_threads_run2.json", train_threads),
    "serve": Table("serve.json", serve_table),
    "serve-abuse": Table("serve_abuse.json", serve_abuse_table),
    "policies-hard": Table("policies_hard.json", lambda d: policies_summary(d, "policies_hard.md")),
}


def config_keys() -> str:
    """The ``mmst-train`` config key reference (key, type, default, documentation), from the dataclasses."""
    from mmst.training.config import iter_config_docs

    rows = []
    for key, tname, default, doc in iter_config_docs():
        d = json.dumps(default) if not isinstance(default, str) else default
        rows.append([f"`{key}`", f"`{tname}`".replace("|", "\\|"), f"`{d}`", doc.replace("|", "\\|").replace("\n", " ")])
    return md_table(["key", "type", "default", "meaning"], rows)


def model_sizes() -> str:
    """Named model sizes with their shapes and parameter counts (4 languages, joint vocabulary of 1000),
    counted with ``model.num_parameters()`` on models built on the ``meta`` device (no memory, no init)."""
    import torch

    from mmst.models import build_model
    from mmst.models.config import SIZES, model_config_for_size

    langs = ["de", "es", "fr", "ja"]
    rows = []
    for size, kw in SIZES.items():
        counts = []
        for arch in ("unified", "separate"):
            with torch.device("meta"):
                m = build_model(model_config_for_size(size, arch=arch, tgt_langs=langs, vocab_size=1000,
                                                      lang_tag_ids={x: 4 + i for i, x in enumerate(langs)}))
            counts.append(params_m(m.num_parameters()))
        rows.append([f"`{size}`", kw["d_model"], f"{kw['encoder_layers']} / {kw['decoder_layers']}",
                     kw["attention_heads"], kw["ffn_dim"], kw["conv_channels"], *counts])
    return md_table(["size", "d", "enc/dec layers", "heads", "FFN", "conv channels", "unified, 4 langs, V=1000",
                     "separate, 4 langs, V=1000"], rows)


GENERATED: dict[str, Callable[[], str]] = {"config-keys": config_keys, "model-sizes": model_sizes}


# ----------------------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class Freshness:
    """Whether the code a results JSON measured has changed since: ``changed`` lists the files (folders, for a
    record of the old form: ``folders``) whose digest differs now (``[]``: current), ``None`` when the JSON
    records no dependencies; ``superseded_by`` names the results file that replaced an archived one."""

    name: str
    commit: str | None
    changed: list[str] | None
    note: str | None = None
    superseded_by: str | None = None
    folders: bool = False

    @property
    def stale(self) -> bool:
        """True when the code changed since, or when nobody knows (no dependency record); never for a
        superseded result."""
        return not self.superseded_by and (self.changed is None or bool(self.changed))

    def describe(self, why: bool = True, limit: int | None = None) -> str:
        """``current``, ``changed since: `a`, `b```, ``dependencies unknown`` (with the record's note when
        ``why``) or ``superseded by `x.json```; ``limit`` names at most that many files, then counts the rest."""
        if self.superseded_by:
            return f"superseded by `{self.superseded_by}`"
        if self.changed is None:
            return "dependencies unknown" + (f" ({self.note})" if self.note and why else "")
        if not self.changed:
            return "current"
        return ("changed since: " + files_text(self.changed, limit)
                + (" (folder digests of the old form)" if self.folders else ""))


#: How many changed files a stale line and the results index name (``--stale`` names every one).
SHOWN_FILES = 6


def files_text(paths: Sequence[str], limit: int | None = None) -> str:
    """```a`, `b``` for ``paths``; with ``limit``, at most that many and ``and N more``."""
    shown = list(paths if limit is None else paths[:limit])
    more = len(paths) - len(shown)
    return ", ".join(f"`{p}`" for p in shown) + (f" and {more} more" if more else "")


class Sources:
    """The results JSON files of one checkout (``ROOT/docs/results``), read once, and the digests of their
    dependency paths in that checkout, taken once per path."""

    def __init__(self, root: Path = REPO):
        self.root = Path(root)
        self.results = self.root / "docs" / "results"
        self._json: dict[str, Any] = {}
        self._digests: dict[str, str] = {}
        self._read = tree_files(self.root)

    def names(self) -> list[str]:
        """Every results JSON file name, sorted."""
        return sorted(p.name for p in self.results.glob("*.json"))

    def load(self, name: str) -> Any:
        """The parsed JSON ``docs/results/NAME``; raises :class:`RenderError` when it cannot be read."""
        if name not in self._json:
            try:
                self._json[name] = json.loads((self.results / name).read_text())
            except (OSError, ValueError) as e:
                raise RenderError(f"docs/results/{name}: cannot read results JSON: {e}") from e
        return self._json[name]

    def freshness(self, name: str) -> Freshness:
        """Compare the JSON's ``provenance.depends_on`` digests with the files under :attr:`root` now."""
        data = self.load(name)
        prov = (data.get("provenance") if isinstance(data, Mapping) else None) or {}
        dep = prov.get("depends_on")
        note = dep.get("note") if isinstance(dep, Mapping) else None
        commit = (prov.get("git_commit") or "").split("-")[0][:10] or None
        later = data.get("superseded_by") if isinstance(data, Mapping) else None
        if later is not None and not (isinstance(later, str) and (self.results / later).is_file()):
            raise RenderError(f"docs/results/{name}: superseded_by {later!r} names no results file in docs/results")
        return Freshness(name, commit, changed_dependencies(dep, self._read, self._digests), note, later,
                         isinstance(dep, Mapping) and bool(dep.get("digest")) and is_folder_form(dep))


def stale_line(f: Freshness) -> str:
    """The line under a stale or superseded table (``""`` for a current one)."""
    if f.superseded_by:
        return (f"**Superseded:** by `docs/results/{f.superseded_by}`; this archived run is kept as measured "
                f"and is not rerun.")
    if not f.stale:
        return ""
    at = f"measured at commit `{f.commit}`" if f.commit else "measured at an unrecorded commit"
    if f.changed is None:
        return f"**Stale:** {at}; the code it measures may have changed since (its dependencies are not recorded)."
    old = "; folder digests of the old form" if f.folders else ""
    more = "; `python tools/render_docs.py --stale` lists them all" if len(f.changed) > SHOWN_FILES else ""
    return (f"**Stale:** {at}; the code it measures has changed since ({files_text(f.changed, SHOWN_FILES)}{old}"
            f"{more}).")


def _script(command: str) -> str:
    """The script a recorded command ran (``bench/bench_x.py``), else the command's start."""
    for tok in command.split():
        tok = tok.rstrip(":;,")
        if tok.endswith((".py", ".sh")):
            return tok
    return command[:40]


def results_index(sources: Sources) -> str:
    """Every results JSON: the documents that render it, its run (script, date, commit) and its freshness."""
    shown: dict[str, set[str]] = {}
    docs = sources.root / "docs"
    for p in doc_files(sources.root):
        text = p.read_text()
        twin = writer_json(p, text, sources)
        if twin:
            shown.setdefault(twin, set()).add(f"[{p.name}]({Path(os.path.relpath(p, docs)).as_posix()})")
        for m in MARKER.finditer(text):
            if m.group(1) == "results" and m.group(2) in TABLES:
                rel = Path(os.path.relpath(p, docs)).as_posix()
                shown.setdefault(TABLES[m.group(2)].json, set()).add(f"[{Path(rel).name}]({rel})")
    rows = []
    for name in sources.names():
        prov = sources.load(name).get("provenance") or {}
        f = sources.freshness(name)
        rows.append([f"`{name}`", ", ".join(sorted(shown.get(name, ()))) or "-", f"`{_script(prov.get('command', '?'))}`",
                     str(prov.get("date", "?"))[:10], f"`{f.commit}`" if f.commit else "-",
                     f.describe(why=False, limit=SHOWN_FILES)])
    return md_table(["results file", "shown in", "written by", "date", "commit", "freshness"], rows)


#: The status line at the top of a writer's page (after its title, if it has one): see :func:`writer_json`.
PAGE_STATUS = re.compile(r"\A((?:# [^\n]*\n\n)?)(?:\*\*(?:Stale|Superseded):\*\* [^\n]*\n\n)?")


def writer_json(page: Path, text: str, sources: Sources) -> str | None:
    """The results JSON whose writer wrote ``page`` beside it (``docs/results/NAME.md`` next to ``NAME.json``,
    without marked blocks: its tables come from that JSON, written in the same run), else ``None``. Such a page
    gets the stale or superseded line of its JSON at its top (:func:`page_status`)."""
    twin = page.with_suffix(".json")
    if page.parent != sources.results or not twin.is_file() or OPEN.search(text):
        return None
    return twin.name


def page_status(text: str, f: Freshness) -> str:
    """``text`` (a writer's page) with the status line of its JSON (:func:`stale_line`) after its title."""
    line = stale_line(f)
    return PAGE_STATUS.sub(lambda m: m[1] + (line + "\n\n" if line else ""), text, count=1)


def _comparable(text: str) -> str:
    """``text`` without what depends on the source tree rather than on the JSON: the stale lines and the
    freshness column of the results index (what ``--check`` ignores)."""
    text = STALE_LINE.sub("", text)
    return INDEX_BLOCK.sub(lambda m: m[1] + re.sub(r"^(\|.*\|)[^|\n]*\|$", r"\1", m[2], flags=re.M) + m[3], text)


# ----------------------------------------------------------------------------------------------- driver
def render_block(kind: str, name: str, sources: Sources) -> str:
    """The text between the markers of block ``kind:name`` (starts and ends with a newline)."""
    if kind == "generated":
        if name == "results-index":
            return "\n" + results_index(sources) + "\n\n"
        if name not in GENERATED:
            raise RenderError(f"unknown generated block {name!r} (known: {', '.join([*GENERATED, 'results-index'])})")
        return "\n" + GENERATED[name]() + "\n\n"
    if name not in TABLES:
        raise RenderError(f"unknown results table {name!r} (known: {', '.join(TABLES)})")
    t = TABLES[name]
    data = sources.load(t.json)
    part = data
    for k in (t.subkey.split("/") if t.subkey else []):
        part = part[k]
    try:
        body = t.render(part)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise RenderError(f"docs/results/{t.json}: cannot render table {name!r}: {type(e).__name__}: {e}") from e
    stale = stale_line(sources.freshness(t.json))
    return "\n" + body + "\n\n" + source_line(t.json, data) + "\n\n" + (stale + "\n\n" if stale else "")


def render_text(text: str, path: str, sources: Sources) -> str:
    """``text`` with every marked block re-rendered. Raises :class:`RenderError` naming ``path:line``."""
    closed = {m.start() for m in MARKER.finditer(text)}
    for m in OPEN.finditer(text):
        if m.start() not in closed:
            line = text.count("\n", 0, m.start()) + 1
            raise RenderError(f"{path}:{line}: marker <!-- {m.group(1)}:{m.group(2)} --> has no closing "
                              f"<!-- /{m.group(1)}:{m.group(2)} --> (or the opening marker is not alone on its line)")

    def sub(m: re.Match[str]) -> str:
        try:
            body = render_block(m.group(1), m.group(2), sources)
        except RenderError as e:
            line = text.count("\n", 0, m.start()) + 1
            raise RenderError(f"{path}:{line}: {e}") from e
        return f"<!-- {m.group(1)}:{m.group(2)} -->{body}<!-- /{m.group(1)}:{m.group(2)} -->"

    return MARKER.sub(sub, text)


def doc_files(root: Path = REPO) -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def run(check: bool, files: Sequence[Path] | None = None, root: Path = REPO) -> list[Path]:
    """Render (or with ``check`` only compare) every file; returns the files that differ(ed).

    ``root``: the checkout whose ``docs/results`` and sources are read (default this one); ``files``: the
    Markdown files (default :func:`doc_files` of ``root``). With ``check``, a file differs only when a table or
    generated block disagrees with its source; a missing or outdated stale line does not count.
    """
    sources = Sources(root)
    changed = []
    for p in files if files is not None else doc_files(root):
        old = p.read_text()
        new = render_text(old, str(p.relative_to(root) if p.is_relative_to(root) else p), sources)
        twin = writer_json(p, old, sources)
        if twin:
            new = page_status(new, sources.freshness(twin))
        if (_comparable(new) != _comparable(old)) if check else (new != old):
            changed.append(p)
            if not check:
                p.write_text(new)
    return changed


def stale_results(root: Path = REPO) -> list[Freshness]:
    """The freshness of every results JSON under ``root/docs/results`` (current ones included)."""
    sources = Sources(root)
    return [sources.freshness(name) for name in sources.names()]


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 when a block differs from its source")
    ap.add_argument("--stale", action="store_true",
                    help="list the results JSON whose measured code has changed since, with every changed file, and the "
                         "superseded ones (exit 0)")
    ap.add_argument("--list", action="store_true", help="print every table name and its JSON file")
    ap.add_argument("--root", type=Path, default=REPO,
                    help="the checkout to render or check (default: the one this script is in)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: render, ``--check``, ``--stale`` or ``--list``."""
    a = build_parser().parse_args(argv)
    root = a.root.resolve()
    if a.stale:
        try:
            every = stale_results(root)
        except RenderError as e:
            print(f"render_docs: error: {e}", file=sys.stderr)
            return 2
        stale = [f for f in every if f.stale]
        archived = [f for f in every if f.superseded_by]
        for f in stale + archived:
            at = f"measured at commit {f.commit}" if f.commit else "no commit recorded"
            print(f"docs/results/{f.name}: {at}; {f.describe().replace('`', '')}")
        also = f" ({len(archived)} superseded)" if archived else ""
        print(f"{len(stale)} of {len(every)} results files stale{also}" if stale else
              f"none of {len(every)} results files stale{also}" if archived else f"all {len(every)} results files current")
        return 0
    if a.list:
        for name, t in TABLES.items():
            print(f"{name:24s} docs/results/{t.json}" + (f" [{t.subkey}]" if t.subkey else ""))
        for name in GENERATED:
            print(f"{name:24s} (generated from the code)")
        print(f"{'results-index':24s} (generated from docs/results and the source tree)")
        return 0
    try:
        changed = run(a.check, root=root)
    except RenderError as e:
        print(f"render_docs: error: {e}", file=sys.stderr)
        return 2
    for p in changed:
        rel = p.relative_to(root)
        print(f"{rel}: out of date with its results JSON (run python tools/render_docs.py)" if a.check
              else f"rendered {rel}")
    return 1 if (a.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
