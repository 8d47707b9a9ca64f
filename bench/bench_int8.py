#!/usr/bin/env python
"""Dynamic int8 linear layers (``--quantize int8``) against fp32: streaming cost and BLEU, same run.

Streams the utterances of a DATA split through a trained model (default: the quickstart's checkpoint,
``exp/synthetic``, from ``make demo``) under wait-k (``--waitk-lagging``, default 3), once with the
fp32 model and once with :func:`mmst.models.quantize.quantize_model`, and writes ``docs/results/int8.json``:

- ``rows``: per precision, the real-time factor (compute s / audio s, the fastest of ``--reps``
  repetitions, fp32 and int8 alternating, the order swapped every repetition), ms per source segment,
  and corpus BLEU per language (:func:`mmst.evaluation.quality.corpus_bleu`);
- ``agreement``: the share of int8 output words equal to the fp32 word at the same position;
- ``summary``: ``int8_over_fp32_rtf`` (int8 RTF / fp32 RTF) and ``int8_bleu_change_k{K}`` (int8 BLEU minus
  fp32 BLEU, mean over the languages);
- ``linear``: how much of that cost is linear layers, without a profiler (whose per-operator overhead
  distorts a run of many small operators): one more fp32 pass counts the calls of every linear layer by
  shape ``(R, in_features, out_features)`` (``R`` rows: 1 for one decoder step of one language), each
  shape is timed alone (median of ``--kernel-reps`` timings of ``--kernel-calls`` calls) as fp32
  ``F.linear``, as :class:`mmst.models.quantize.Int8DynamicLinear` (quantize the activations, int8
  product, rescale) and as its int8 product ``torch._int_mm`` alone, and the calls are priced at those
  times: ``linear_share`` (fp32 linear time / fp32 compute time), ``int8_rtf_bound_free_linear``
  (``1 - linear_share``: the int8/fp32 RTF if int8 linear layers cost nothing, Amdahl's law) and
  ``int8_over_fp32_rtf_predicted`` (``1 - linear_share + int8 linear time / fp32 compute time``, to set
  beside the measured ratio); ``shapes``: every shape with its call count and times.

Timing uses ``torch.set_num_threads(--threads)`` (default 1) and wall-clock ``perf_counter`` on an
otherwise idle machine (a loaded machine makes the ratio meaningless). ``--quick``: two utterances, one
repetition (a smoke run; give ``--out``).
"""

from __future__ import annotations

import functools
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from provenance import RESULTS_DIR, run_record, write_results

from mmst.cli_help import ArgumentParser

#: The paths this benchmark runs without importing them; the repository modules that it and its child processes
#: import are recorded at run time (``provenance.depends_on``, bench/provenance.py).
DEPENDS_ON = ("bench/bench_int8.py",)

MODES = ("none", "int8")


def build_parser() -> ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="bench/bench_int8.py", description=__doc__)
    p.add_argument("--model", dest="model", default="exp/synthetic/model/checkpoint_best.pt",
                   help="a trained model: an exported model folder or a training checkpoint")
    p.add_deprecated_alias("--checkpoint", "--model")
    p.add_argument("--data", default=None,
                   help="DATA directory of the streamed split (default: the one the checkpoint records)")
    p.add_argument("--split", default="tst-COMMON", help="DATA split streamed")
    p.add_argument("--tgt-langs", default=None, help="languages decoded jointly (default: all of the model's)")
    p.add_argument("--waitk-lagging", type=int, default=3, help="wait-k lagging k in pre-decision chunks")
    p.add_argument("--source-segment-size", type=float, default=320.0, help="source segment size (ms)")
    p.add_argument("--max-utterances", type=int, default=300, help="utterances of the split streamed")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per precision (the fastest is kept)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--kernel-reps", type=int, default=3, help="timings per kernel and shape (the median is kept)")
    p.add_argument("--kernel-calls", type=int, default=100, help="calls per timing of one kernel and shape")
    p.add_argument("--quick", action="store_true", help="2 utterances, 1 repetition (smoke run)")
    p.add_argument("--out", default=str(RESULTS_DIR / "int8.json"), help="results JSON")
    p.add_argument("--note", default="", help="free text recorded in the provenance (e.g. machine shared)")
    return p


def stream_split(translator: Any, utts: list[dict], audios: list, langs: list[str], units: dict[str, str],
                 segment_ms: float) -> tuple[float, float, list[float], dict[str, list[list[str]]]]:
    """``(compute_s, audio_s, ms per segment, {lang: [output units per utterance]})`` of one pass."""
    from mmst.evaluation.streaming import stream_utterance

    compute = audio_s = 0.0
    seg_ms: list[float] = []
    out: dict[str, list[list[str]]] = {lang: [] for lang in langs}
    for u, audio in zip(utts, audios, strict=True):
        res = stream_utterance(translator, audio, langs, units, segment_ms, utt_id=u["id"])
        compute += res.compute_s
        audio_s += audio.size / 16000.0
        seg_ms += res.segment_compute_ms
        for lang in langs:
            out[lang].append(list(res.per_lang[lang].units))
    return compute, audio_s, seg_ms, out


def word_agreement(a: list[list[str]], b: list[list[str]]) -> float:
    """Share of positions (over the longer of each pair of outputs) where ``b`` writes ``a``'s unit."""
    same = sum(x == y for ua, ub in zip(a, b, strict=True) for x, y in zip(ua, ub, strict=False))
    total = sum(max(len(ua), len(ub)) for ua, ub in zip(a, b, strict=True))
    return same / total if total else 1.0


def count_linear_calls(model: torch.nn.Module, pass_fn: Any) -> Counter:
    """``Counter`` of ``(rows, in_features, out_features)`` over every ``nn.Linear`` call of ``model`` while
    ``pass_fn()`` runs (forward pre-hooks, removed afterwards)."""
    calls: Counter = Counter()

    def hook(mod: torch.nn.Linear, inputs: tuple) -> None:
        calls[(inputs[0].numel() // mod.in_features, mod.in_features, mod.out_features)] += 1

    handles = [m.register_forward_pre_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    try:
        pass_fn()
    finally:
        for h in handles:
            h.remove()
    return calls


def _us_per_call(fn: Any, reps: int, calls: int) -> float:
    """Median over ``reps`` timings of the microseconds per call of ``fn()`` (``calls`` calls each), after one
    untimed call."""
    import time

    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        ts.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(ts)


def time_kernels(calls: Counter, reps: int, n_calls: int) -> list[dict[str, Any]]:
    """Per shape ``(rows, in, out)`` of ``calls``: its count and the microseconds per call of fp32 ``F.linear``,
    ``Int8DynamicLinear`` and ``torch._int_mm`` (random weights and inputs: the kernels' cost does not
    depend on the values). Sorted by fp32 time spent (count x fp32 time), largest first."""
    from mmst.models.quantize import Int8DynamicLinear

    g = torch.Generator().manual_seed(0)
    out = []
    for (r, k, n), count in calls.items():
        lin = torch.nn.Linear(k, n)
        q = Int8DynamicLinear(lin)
        x = torch.randn(r, k, generator=g)
        xq = torch.randint(-127, 128, (r, k), dtype=torch.int8, generator=g)
        fns = {"fp32_us": functools.partial(torch.nn.functional.linear, x, lin.weight, lin.bias),
               "int8_us": functools.partial(q, x), "int_mm_us": functools.partial(torch._int_mm, xq, q.weight_int8_t)}
        row: dict[str, Any] = {"rows": r, "in_features": k, "out_features": n, "calls": count}
        with torch.inference_mode():
            for name, fn in fns.items():
                row[name] = _us_per_call(fn, reps, n_calls)
        row["int8_over_fp32"] = row["int8_us"] / row["fp32_us"]
        out.append(row)
    return sorted(out, key=lambda x: -x["calls"] * x["fp32_us"])


def linear_summary(shapes: list[dict[str, Any]], fp32_compute_s: float) -> dict[str, Any]:
    """The ``linear`` section from the timed ``shapes`` and the fp32 pass's compute seconds (see the module
    docstring)."""
    fp32_s = sum(x["calls"] * x["fp32_us"] for x in shapes) / 1e6
    int8_s = sum(x["calls"] * x["int8_us"] for x in shapes) / 1e6
    share = fp32_s / fp32_compute_s
    return {"calls": sum(x["calls"] for x in shapes), "fp32_linear_s": fp32_s, "int8_linear_s": int8_s,
            "fp32_compute_s": fp32_compute_s, "linear_share": share, "int8_rtf_bound_free_linear": 1.0 - share,
            "int8_over_fp32_rtf_predicted": 1.0 - share + int8_s / fp32_compute_s, "shapes": shapes}


def run(args) -> dict[str, Any]:
    """Both precisions on the same utterances; the results object (see the module docstring)."""
    from mmst.evaluation.bundle import load_bundle
    from mmst.evaluation.frontend import read_utterance_audio
    from mmst.evaluation.instances import join_units
    from mmst.evaluation.quality import corpus_bleu, latency_units
    from mmst.evaluation.utterances import load_utterances

    torch.set_num_threads(args.threads)
    n_utts, reps = (2, 1) if args.quick else (args.max_utterances, args.reps)
    langs = args.tgt_langs.split(",") if args.tgt_langs else None
    systems = {m: load_bundle(args.model, data_dir=args.data, tgt_langs=langs, quantize=m) for m in MODES}
    langs = list(systems["none"].tgt_langs)
    if systems["none"].data_dir is None:
        raise SystemExit("bench_int8: a model folder needs --data (the DATA directory of the streamed split)")
    units = latency_units(langs)
    utts = load_utterances(systems["none"].data_dir, args.split, langs, n_utts)
    audios = [read_utterance_audio(u) for u in utts]
    tr = {m: s.translator(args.waitk_lagging) for m, s in systems.items()}
    rtf: dict[str, list[float]] = {m: [] for m in MODES}
    seg: dict[str, list[float]] = {m: [] for m in MODES}
    outputs: dict[str, dict[str, list[list[str]]]] = {}
    for r in range(reps):
        for m in (MODES if r % 2 == 0 else MODES[::-1]):
            compute, audio_s, seg_ms, out = stream_split(tr[m], utts, audios, langs, units, args.source_segment_size)
            rtf[m].append(compute / audio_s)
            seg[m].append(statistics.fmean(seg_ms) if seg_ms else 0.0)
            outputs.setdefault(m, out)  # greedy decoding: every repetition writes the same words
    rows: dict[str, Any] = {}
    for m in MODES:
        bleu = {lang: corpus_bleu([join_units(o, units[lang]) for o in outputs[m][lang]],
                                  [u["refs"][lang] for u in utts], lang).score for lang in langs}
        rows[m] = {"rtf": min(rtf[m]), "rtf_reps": rtf[m], "ms_per_segment": min(seg[m]), "bleu": bleu}
    k = args.waitk_lagging
    change = statistics.fmean(rows["int8"]["bleu"][lang] - rows["none"]["bleu"][lang] for lang in langs)
    fp32_compute_s = min(rtf["none"]) * sum(a.size for a in audios) / 16000.0
    calls = count_linear_calls(systems["none"].model, lambda: stream_split(
        tr["none"], utts, audios, langs, units, args.source_segment_size))
    linear = linear_summary(time_kernels(calls, 1 if args.quick else args.kernel_reps,
                                         10 if args.quick else args.kernel_calls), fp32_compute_s)
    return {
        "summary": {"int8_over_fp32_rtf": rows["int8"]["rtf"] / rows["none"]["rtf"], f"int8_bleu_change_k{k}": change},
        "rows": {"fp32": rows["none"], "int8": rows["int8"]},
        "agreement": {lang: word_agreement(outputs["none"][lang], outputs["int8"][lang]) for lang in langs},
        "linear": linear,
        "config": {"model": str(args.model), "data": str(systems["none"].data_dir), "split": args.split,
                   "tgt_langs": langs, "waitk_lagging": k, "source_segment_size_ms": args.source_segment_size,
                   "n_utterances": len(utts), "reps": reps, "threads": args.threads, "quick": bool(args.quick),
                   "kernel_reps": args.kernel_reps, "kernel_calls": args.kernel_calls,
                   "audio_s": sum(a.size for a in audios) / 16000.0},
    }


def main(argv: list[str] | None = None) -> int:
    """Run, print the summary, write the JSON."""
    args = build_parser().parse_args(argv)
    if not Path(args.model).exists():
        print(f"bench_int8: no model {args.model} (run `make demo`, or pass --model)", file=sys.stderr)
        return 1
    prov = run_record(depends_on=DEPENDS_ON)
    if args.note:
        prov["note"] = args.note
    res = run(args)
    print(" ".join(f"{k}={v:.3f}" for k, v in res["summary"].items()))
    write_results(args.out, {"provenance": prov, **res})
    return 0


if __name__ == "__main__":
    sys.exit(main())
