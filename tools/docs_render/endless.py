"""Table of docs/longform.md: quality of a bounded encoder left context (rotary positions) against unbounded
(``bench/bench_left_context.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import md_table, num


def left_context(d: Mapping[str, Any]) -> str:
    """Per wait-k and language: BLEU (LAAL ms) of the unbounded and the bounded model, and their BLEU difference
    (mean over languages); a line naming each model's encoder settings and experiment."""
    langs, systems = d["langs"], d["systems"]
    rows = []
    for k in d["ks"]:
        for name in ("unbounded", "bounded"):
            sc = systems[name]["scores"][k]
            rows.append([k.replace("k", "wait-"), name]
                        + [f"{num(sc[lang]['BLEU'])} ({num(sc[lang]['LAAL'], '{:.0f}')})" for lang in langs]
                        + [num(d["summary"]["bleu_diff_mean"][k], "{:+.2f}") if name == "bounded" else ""])
    table = md_table(["k", "left context"] + [f"{lang} BLEU (LAAL ms)" for lang in langs]
                     + ["BLEU bounded - unbounded (mean)"], rows)

    def describe(name: str) -> str:
        e = systems[name]["encoder"]
        left = f"{e['encoder_left_chunks']} chunks" if e["encoder_left_chunks"] else "unbounded"
        return (f"{name}: left context {left}, positions {e['encoder_pos_enc_type']}, "
                f"{e['pre_decision_ratio']} states per chunk, {e['encoder_layers']} encoder layers")

    return table + "\n\ntst-COMMON, joint decoding of all languages. " + "; ".join(
        describe(n) for n in ("unbounded", "bounded")) + "."


def _cost(rec: Mapping[str, Any]) -> str:
    """The per-chunk CPU cost at the end against the start of the stream (``bench_continuous.cost_growth``)."""
    w = rec["cost_window_min"]
    return (f"CPU time per chunk, median of the last {w} minutes / of minutes 2-{1 + w}: "
            f"{num(rec['cpu_ms_per_chunk_end'], '{:.1f}')} / {num(rec['cpu_ms_per_chunk_start'], '{:.1f}')} ms = "
            f"**{num(rec['cpu_ms_per_chunk_ratio'], '{:.2f}')}**")


def continuous_rss(d: Mapping[str, Any]) -> str:
    """The RSS measurement of ``bench/bench_continuous.py --rss-model`` (``rss_no_pause``): growth from minute 2 to
    the end against its goal, and RSS, the translator's tensor elements and the compute per chunk every 5 minutes
    (and at minutes 1, 2 and the end), with the restarts and words so far (a stalled language would show as
    restarts and words that stop growing)."""
    rec = d.get("rss_no_pause")
    if not rec:
        return "Not measured in this run (`--rss-model`)."
    rows = rec["per_minute"]
    last = rows[-1]["minute"]
    keep = [r for r in rows if r["minute"] in (1, 2, last) or float(r["minute"]).is_integer() and r["minute"] % 5 == 0]
    table = md_table(["minute", "RSS (MiB)", "translator state (elements)", "CPU ms per chunk", "wall ms per chunk",
                      "sentence restarts", "words written"],
                     [[num(r["minute"], "{:g}"), num(r["rss_mib"], "{:.1f}"), str(r["state_elements"]),
                       num(r.get("cpu_ms_per_chunk"), "{:.1f}"), num(r["ms_per_chunk"], "{:.1f}"), str(r["restarts"]),
                       str(r["words"])] for r in keep])
    goal = d.get("summary", {}).get("goals", {}).get("rss_growth_mib_30min_no_pause", {})
    met = {True: "met", False: "missed"}.get(goal.get("met"), "-")
    left = rec["encoder_left_chunks"]
    return (f"RSS growth from minute 2 to minute {num(last, '{:g}')}: **{num(rec['rss_growth_mib'], '{:.1f}')} MiB** "
            f"(goal {goal.get('goal', '<= 50')}: {met}); {_cost(rec)}.\n\n" + table
            + f"\n\n{num(rec['minutes'], '{:g}')} minutes of tst-COMMON utterances joined with pauses of "
            f"{num(rec['pause_ms'][0], '{:g}')}-{num(rec['pause_ms'][1], '{:g}')} ms (VAD segments closed: "
            f"{rec['segments_closed']}, cut by the {num(rec['max_segment_s'], '{:g}')} s cap: {rec['cap_cuts']}), "
            f"{rec['policy']}, {', '.join(rec['langs'])} jointly; the model: left context "
            f"{f'{left} chunks' if left else 'unbounded'}, positions {rec['encoder_pos_enc_type']}. Measured in a child "
            "process" + _run_line(rec.get("provenance")) + ".")


def _run_line(prov: Mapping[str, Any] | None) -> str:
    """`` by `COMMAND` on DATE at commit C`` of a record with its own provenance (the RSS run, made apart from
    the talks of the same JSON), else nothing."""
    if not prov:
        return ""
    commit = str(prov.get("git_commit") or "")[:10]
    return f" by `{prov.get('command')}` on {str(prov.get('date', ''))[:10]} at commit `{commit}`"
