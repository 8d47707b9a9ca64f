"""Tables of docs/longform.md: long-form cost, rows per pause range, continuous speech, the
StreamLAAL cross-check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import goal_met, md_table, num, params_m, pause_range, pct


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


#: The metrics compared with the ``omnisteval`` command, in the order the check line names them.
_OMNISTEVAL_METRICS = ("LongYAAL", "LongYAAL_CA", "LongAL", "LongAL_CA", "LongLAAL", "LongLAAL_CA", "SoftSeg_BLEU",
                       "SoftSeg_chrF")


def longform_iwslt(d: Mapping[str, Any]) -> str:
    """The cross-check talks scored as the IWSLT 2026 track scores them: per talk, segmentation and language,
    LongYAAL (CU and CA), BLEU and chrF after SoftSegmenter (OmniSTEval), then StreamLAAL and BLEU after mWER;
    below, the ``omnisteval`` command on the same files (summary ``omnisteval_cli``: the largest difference per
    metric, its goal and whether it is met). A JSON written before the bench scored with OmniSTEval gets one
    line saying so."""
    check = (d.get("summary") or {}).get("omnisteval_cli")
    talks = [(key, d.get(key)) for key in ("crosscheck", "crosscheck_capped")]
    if not check or not any(x for _, x in talks):
        return ("This run recorded no OmniSTEval scores (`bench/bench_longform.py` writes them with its "
                "cross-check, `--crosscheck-utts N`).")
    seg = {"vad": "VAD", "oracle": "oracle"}
    rows = []
    for key, x in talks:
        if not x:
            continue
        capped = key == "crosscheck_capped"
        pauses = pause_range(x.get("pause_ms") or d["config"]["pause_ms"])
        talk = f"{pauses} ms pauses" + (f", VAD cut at {num(x.get('max_segment_s'), '{:g}')} s" if capped else "")
        for name, label in seg.items():
            for lang, per in x["per_lang"].items():
                v = per.get(name) or {}
                rows.append([talk, label, lang, num(v.get("LongYAAL"), "{:.0f}"), num(v.get("LongYAAL_CA"), "{:.0f}"),
                             num(v.get("SoftSeg_BLEU")), num(v.get("SoftSeg_chrF")),
                             num(v.get("StreamLAAL"), "{:.0f}"), num(v.get("BLEU"))])
    table = md_table(["talk", "segmentation", "lang", "LongYAAL (ms)", "LongYAAL_CA (ms)", "BLEU (SoftSegmenter)",
                      "chrF (SoftSegmenter)", "StreamLAAL (ms, mWER)", "BLEU (mWER)"], rows)
    diff = check.get("max_abs_diff") or {}
    named = ", ".join(f"{k} {num(diff[k], '{:.1e}')}" for k in _OMNISTEVAL_METRICS if k in diff)
    tsv = check.get("tsv_max_abs_diff") or {}
    worst_tsv = max(tsv.values()) if tsv else None
    langs = check.get("langs") or []
    cjk = [lang for lang in langs if lang.split("-")[0] in ("ja", "zh")]
    chars = f"; {' and '.join(cjk)} at character level" if cjk else ""
    failed = check.get("failed") or []
    unscored = check.get("not_scored") or []
    line = (f"The `omnisteval` command on the same files ({check['runs']} runs: talk x segmentation x language, "
            f"{', '.join(langs)}{chars}), largest difference from the adapter: "
            f"{named} (goal: {check['goal']}: {'met' if check['met'] else 'missed'}); against the 4 decimals of its "
            f"`scores.tsv`: at most {num(worst_tsv, '{:.1e}')}.")
    if failed:
        line += f" Not equal: {'; '.join(failed)}."
    if unscored:
        line += f" Not scored by OmniSTEval: {'; '.join(unscored)}."
    return table + "\n\n" + line
