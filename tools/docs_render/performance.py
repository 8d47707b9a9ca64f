"""Tables of docs/performance.md: features, alignment, streaming cost, training speed, the fairseq
baseline, threads, int8."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import goal_met, md_table, num, params_m, pct


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
