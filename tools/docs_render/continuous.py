"""Table of docs/longform.md for continuous speech (``bench/bench_continuous.py``): per talk and policy, BLEU of
each system with VAD segmentation against each model's oracle segmentation; per system, the summary keys; for the
best system, the goals. A JSON written before the bench compared systems (one model, restarts off and on per
row) renders in the earlier layout (:func:`continuous_v1`)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from .common import md_table, num, pct
from .longform import continuous as continuous_v1


def _mean_bleu(run: Mapping[str, Any] | None, langs: list[str]) -> str:
    vals = [run["per_lang"][lang]["BLEU"] for lang in langs if run and run["per_lang"][lang].get("BLEU") is not None]
    return num(statistics.mean(vals)) if vals else "-"


def _share_max(run: Mapping[str, Any] | None, langs: list[str]) -> str:
    if not run:
        return "-"
    return pct(max((run["per_lang"][lang].get("untranslated_speech_share") or 0.0) for lang in langs))


def _goals(summ: Mapping[str, Any]) -> str:
    goals = summ.get("goals", {})
    on = summ.get("chosen_on")
    label = (f"measure ({'reported' if on and on != 'test' else 'best'} system: {summ['system']}"
             + (f", {summ['policy']}" if summ.get("policy") else "")
             + (f", chosen on {on}" if on and on != "test" else ", chosen on the test talks" if on else "") + ")")
    return md_table([label, "value", "goal", "met"],
                    [[k, num(summ.get(k), "{:.3f}" if "ratio" in k or "share" in k else "{:.0f}"), g["goal"],
                      "-" if g["met"] is None else ("met" if g["met"] else "missed")] for k, g in goals.items()]) + (
        f"\n\nThe restart error is the median over every restart on the test talks, of every system with restarts "
        f"at every policy ({summ['restart_error_n']} restarts); of {summ['restart_error_system']} alone (the "
        f"reported system, or the best one with restarts when it has none): "
        f"{num(summ['restart_error_ms_median_system'], '{:.0f}')} ms over {summ['restart_error_n_system']} restart(s)."
        if "restart_error_n_system" in summ else "")


def _tuning(tun: Mapping[str, Any], cfg: Mapping[str, Any]) -> str:
    """The configurations tried on the tuning split, best first, and the one chosen."""
    c = tun["chosen"]
    cands = sorted(tun["candidates"], key=lambda x: (-x["bleu_ratio_vs_oracle_min"], -(x["vad_bleu_mean"] or 0.0),
                                                     -x["max_segment_s"]))
    caps = ", ".join(num(x, "{:g}") for x in cfg.get("max_segment_grid") or sorted({x["max_segment_s"] for x in cands}))
    n = cfg.get("tune_utterances") or cfg["utterances"]
    return (f"Chosen on the {tun['split']} talks ({n} utterances each, the same pause ranges and "
            f"policies; VAD segment caps {caps} s): **{c['system']}, {c['policy']}** (cap "
            f"{num(c['max_segment_s'], '{:g}')} s). The summary below reports it on the test talks.\n\n"
            + md_table([f"system ({tun['split']})", "policy", "segment cap (s)", "BLEU VAD / oracle (min)",
                        "BLEU VAD (mean)"],
                       [[x["base_system"], x["policy"], num(x["max_segment_s"], "{:g}"),
                         num(x["bleu_ratio_vs_oracle_min"], "{:.3f}"), num(x.get("vad_bleu_mean"))] for x in cands]))


def continuous(d: Mapping[str, Any]) -> str:
    """Continuous speech: the talks table (mean BLEU over languages per system, the oracle per model, the largest
    untranslated share), the systems table (the summary keys of each system and policy) and the goals."""
    cfg, rows, summ = d["config"], d["rows"], d["summary"]
    if "systems" not in cfg:
        return continuous_v1(d)
    langs, systems = cfg["tgt_langs"], cfg["systems"]
    models = [m for m in ("quickstart", "multisent") if any(r["oracle"].get(m) for r in rows)]
    body = []
    for r in rows:
        vad = r["vad"]
        first = next((vad[s] for s in systems if s in vad), None)
        body.append([r["split"], f"{num(r['pause_ms'][0], '{:g}')}-{num(r['pause_ms'][1], '{:g}')}", r["policy"],
                     f"{first['n_segments']}" if first else "-",
                     *[_mean_bleu(r["oracle"].get(m), langs) for m in models],
                     *[_mean_bleu(vad.get(s), langs) for s in systems],
                     " / ".join(_share_max(vad.get(s), langs) for s in systems),
                     " / ".join(f"{vad[s]['n_restarts']}" if s in vad else "-" for s in systems if "restart" in s)])
    out = [md_table(["split", "pauses (ms)", "policy", "VAD segments", *[f"BLEU oracle, {m}" for m in models],
                     *[f"BLEU VAD, {s}" for s in systems], "untranslated (max): " + " / ".join(systems),
                     "restarts: " + " / ".join(s for s in systems if "restart" in s)], body),
           f"BLEU: mean over {', '.join(langs)} (per language in the JSON); {cfg['utterances']} utterances per talk, "
           f"VAD with {num(cfg['vad_min_silence_ms'], '{:.0f}')} ms segment-ending silence and segments of at most "
           f"{num(cfg['max_segment_s'], '{:g}')} s, {num(cfg['source_segment_size_ms'], '{:.0f}')} ms chunks; the "
           f"oracle: each sentence its own segment, no restarts. Models: quickstart = `{cfg['model']}`, multisent = "
           f"`{cfg.get('multisent_model') or '-'}`."]
    per = summ.get("systems") or []
    out.append(md_table(["system", "policy", "BLEU VAD / oracle (min)", "BLEU VAD (mean)", "StreamLAAL excess (max, ms)",
                         "untranslated (max)", "restarts", "restart error (median, ms)"],
                        [[x["system"], x["policy"], num(x["bleu_ratio_vs_oracle_min"], "{:.3f}"),
                          num(x.get("vad_bleu_mean")), num(x["streamlaal_excess_ms_max"], "{:.0f}"),
                          pct(x["untranslated_share_max"]), f"{x['n_restarts']}",
                          num(x["restart_error_ms_median"], "{:.0f}")] for x in per]))
    if d.get("tuning"):
        out.append(_tuning(d["tuning"], cfg))
    out.append(_goals(summ))
    edge = summ.get("oracle_edge_bleu_ratio_min")
    if edge:
        out.append(f"Edges: with every oracle segment widened by {num(cfg.get('oracle_edge_ms'), '{:.0f}')} ms of "
                   "silence on both sides (at most half the pause to a neighbour), the lowest BLEU ratio to the oracle "
                   "segments' over talks and languages (1 = the edges do not matter): "
                   + "; ".join(f"{m} " + ", ".join(f"{num(v, '{:.3f}')} at {pol}" for pol, v in per.items())
                               if isinstance(per, dict) else f"{m} {num(per, '{:.3f}')}" for m, per in edge.items())
                   + ".")
    return "\n\n".join(out)
