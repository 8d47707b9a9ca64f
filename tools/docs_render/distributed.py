"""Tables of docs/distributed.md: the straggler simulation and the mmst training runs with stragglers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .common import md_table, num


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
