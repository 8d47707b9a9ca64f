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
- ``profile``: where the fp32 pass spends its time (``torch.profiler`` over ``--profile-utterances``):
  ``linear_share``, the share of the wall time inside ``aten::linear`` (what int8 linear layers replace),
  hence ``int8_rtf_bound_free_linear = 1 - linear_share``, the int8/fp32 RTF if the int8 layers cost nothing
  (Amdahl's law), and the top operators by self time;
- ``kernels``: per linear shape of the model and rows ``R`` (1 = one decoder step of one language), the
  microseconds of one call of fp32 ``F.linear``, of :class:`mmst.models.quantize.Int8DynamicLinear`
  (quantize the activations, int8 product, rescale) and of its int8 product ``torch._int_mm`` alone
  (median of ``--kernel-reps`` timings of 200 calls).

Timing uses ``torch.set_num_threads(--threads)`` (default 1) and wall-clock ``perf_counter`` on an
otherwise idle machine (a loaded machine makes the ratio meaningless). ``--quick``: two utterances, one
repetition (a smoke run; give ``--out``).
"""

from __future__ import annotations

import functools
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from provenance import RESULTS_DIR, run_record, write_results

from mmst.cli_help import ArgumentParser

#: The source paths this benchmark exercises (recorded with their digests in ``provenance.depends_on``).
DEPENDS_ON = (
    "bench/bench_int8.py",
    "mmst/models/",
    "mmst/simultaneous/",
    "mmst/evaluation/",
    "mmst/features.py",
)

MODES = ("none", "int8")


def build_parser() -> ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(prog="bench/bench_int8.py", description=__doc__)
    p.add_argument("--model", "--checkpoint", dest="model", default="exp/synthetic/model/checkpoint_best.pt",
                   help="a trained model: an exported model folder or a training checkpoint")
    p.add_argument("--data", default=None,
                   help="DATA directory of the streamed split (default: the one the checkpoint records)")
    p.add_argument("--split", default="tst-COMMON", help="DATA split streamed")
    p.add_argument("--tgt-langs", default=None, help="languages decoded jointly (default: all of the model's)")
    p.add_argument("--waitk-lagging", type=int, default=3, help="wait-k lagging k in pre-decision chunks")
    p.add_argument("--source-segment-size", type=float, default=320.0, help="source segment size (ms)")
    p.add_argument("--max-utterances", type=int, default=300, help="utterances of the split streamed")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per precision (the fastest is kept)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--profile-utterances", type=int, default=20,
                   help="utterances of the profiled fp32 pass (0: no profile)")
    p.add_argument("--kernel-rows", default="1,4,8", help="rows R of the timed linear calls, comma separated")
    p.add_argument("--kernel-reps", type=int, default=5, help="timings per kernel and shape (the median is kept)")
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


def profile_pass(translator: Any, utts: list[dict], audios: list, langs: list[str], units: dict[str, str],
                 segment_ms: float, top: int = 12) -> dict[str, Any]:
    """One profiled pass: ``{"linear_share", "int8_rtf_bound_free_linear", "wall_s", "top_ops"}`` (see the
    module docstring; ``top_ops``: the ``top`` operators by self CPU time, with their share of the wall time)."""
    import time

    from torch.profiler import ProfilerActivity, profile

    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        stream_split(translator, utts, audios, langs, units, segment_ms)
    wall_us = (time.perf_counter() - t0) * 1e6
    ev = prof.key_averages()
    linear_us = sum(e.cpu_time_total for e in ev if e.key == "aten::linear")  # inclusive: addmm and its views
    share = min(1.0, linear_us / wall_us)
    ranked = sorted(ev, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {"linear_share": share, "int8_rtf_bound_free_linear": 1.0 - share, "wall_s": wall_us / 1e6,
            "n_utterances": len(utts),
            "top_ops": [{"op": e.key, "calls": e.count, "self_share": e.self_cpu_time_total / wall_us,
                         "self_us_per_call": e.self_cpu_time_total / max(1, e.count)} for e in ranked]}


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


def time_kernels(model: torch.nn.Module, rows: list[int], reps: int, calls: int = 200) -> list[dict[str, Any]]:
    """Microseconds per call of fp32 ``F.linear``, ``Int8DynamicLinear`` and ``torch._int_mm`` for every distinct
    ``(in_features, out_features)`` of ``model``'s linear layers and every ``R`` in ``rows``."""
    from mmst.models.quantize import Int8DynamicLinear

    shapes = sorted({(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)})
    g = torch.Generator().manual_seed(0)
    out = []
    for (k, n), r in ((s, r) for s in shapes for r in rows):
        lin = torch.nn.Linear(k, n)
        q = Int8DynamicLinear(lin)
        x = torch.randn(r, k, generator=g)
        xq = torch.randint(-127, 128, (r, k), dtype=torch.int8, generator=g)
        fns = {"fp32_us": functools.partial(torch.nn.functional.linear, x, lin.weight, lin.bias),
               "int8_us": functools.partial(q, x), "int_mm_us": functools.partial(torch._int_mm, xq, q.weight_int8_t)}
        row: dict[str, Any] = {"in_features": k, "out_features": n, "rows": r}
        with torch.inference_mode():
            for name, fn in fns.items():
                row[name] = _us_per_call(fn, reps, calls)
        row["int8_over_fp32"] = row["int8_us"] / row["fp32_us"]
        out.append(row)
    return out


def run(args) -> dict[str, Any]:
    """Both precisions on the same utterances; the results object (see the module docstring)."""
    from mmst.evaluation.frontend import read_utterance_audio
    from mmst.evaluation.instances import join_units
    from mmst.evaluation.loading import load_system
    from mmst.evaluation.quality import corpus_bleu, latency_units
    from mmst.evaluation.utterances import load_utterances

    torch.set_num_threads(args.threads)
    n_utts, reps = (2, 1) if args.quick else (args.max_utterances, args.reps)
    langs = args.tgt_langs.split(",") if args.tgt_langs else None
    systems = {m: load_system(args.model, data_dir=args.data, tgt_langs=langs, quantize=m) for m in MODES}
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
    n_prof = min(len(utts), 2 if args.quick else args.profile_utterances)
    prof = profile_pass(tr["none"], utts[:n_prof], audios[:n_prof], langs, units,
                        args.source_segment_size) if n_prof > 0 else None
    kernel_rows = [int(r) for r in args.kernel_rows.split(",") if r.strip()]
    kernels = time_kernels(systems["none"].model, kernel_rows, 1 if args.quick else args.kernel_reps)
    return {
        "summary": {"int8_over_fp32_rtf": rows["int8"]["rtf"] / rows["none"]["rtf"], f"int8_bleu_change_k{k}": change},
        "rows": {"fp32": rows["none"], "int8": rows["int8"]},
        "agreement": {lang: word_agreement(outputs["none"][lang], outputs["int8"][lang]) for lang in langs},
        "profile": prof,
        "kernels": kernels,
        "config": {"model": str(args.model), "data": str(systems["none"].data_dir), "split": args.split,
                   "tgt_langs": langs, "waitk_lagging": k, "source_segment_size_ms": args.source_segment_size,
                   "n_utterances": len(utts), "reps": reps, "threads": args.threads, "quick": bool(args.quick),
                   "profile_utterances": n_prof, "kernel_rows": kernel_rows},
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
