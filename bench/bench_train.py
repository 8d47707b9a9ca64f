#!/usr/bin/env python
"""Training throughput, peak memory and model FLOPs utilisation (MFU) of mmst models.

For every (model size, thread count) it times full training updates (forward + backward + clip +
AdamW step via :class:`mmst.training.strategy.SingleProcessStrategy`, the code path of ``mmst-train``)
and reports:

* ``frames_per_s``: valid (non-padding) fbank frames (10 ms each) per second of wall time;
* ``tokens_per_s``: target tokens (all languages, EOS included) per second;
* ``peak_rss_mb``: peak resident memory of the measuring process (MiB, ``ru_maxrss``; each
  configuration runs in a fresh subprocess so the figure is its own), and on CUDA
  ``torch.cuda.max_memory_allocated`` (MiB);
* ``model_gflop_per_update``: forward + backward FLOPs of one update counted with
  :class:`torch.utils.flop_counter.FlopCounterMode` (matmuls, convolutions and
  scaled-dot-product attention; 1 multiply-add = 2 FLOPs; elementwise ops, layer norms, softmax
  outside SDPA and the optimiser are not counted, as usual for MFU, Chowdhery et al. 2022, app. B);
* ``peak_gflops``: the machine's measured peak matmul rate at the same dtype and thread count
  (best of ``torch.mm`` timings of ``--peak-n`` x ``--peak-n`` matrices, taken before and after the timed
  updates, in the dtype of the step's
  matmuls: fp32, or bf16 for ``--precision bf16`` and on CUDA);
* ``mfu`` = (model FLOPs per update / seconds per update) / peak matmul FLOP/s. An MFU above 100% is
  a measurement bug: the row gets ``mfu: null`` (value kept as ``mfu_invalid``), the table says BUG
  and the exit status is 1.
* augmentation row (``--specaugment``, default LB): seconds of SpecAugment on the utterances of one
  batch, and of what on-the-fly speed perturbation (soxr + fbank) would cost, each as % of the update
  time (``specaugment_pct``, ``speed_onthefly_pct``).

bf16 rows on a CPU without native bf16 (no AVX512-BF16/AMX, :func:`mmst.training.step.bf16_warning`)
are skipped with a message: bf16 is emulated there, on a different kernel path for the model than for
the peak ``torch.mm``, so its MFU would be meaningless (and the row takes many times the fp32 time).

Batches are synthetic with realistic shapes (no corpus needed): about ``--frames`` fbank frames per
batch (default 20000 = 200 s of speech), utterances of ``--utt-frames`` frames (lengths spread
80-100% to produce realistic padding), ``--langs`` target languages with ``--tokens-per-s`` target
tokens per second of speech, joint vocab ``--vocab`` (1000), CTC on an English transcript.  With
``--data DATA`` real batches of ``DATA/train.tsv`` are used instead (bucketed by ``--frames`` as
max-tokens); the loader time is then reported as ``loader_wait_pct``.

Example::

    python bench/bench_train.py                          # xs and s, 1 and 2 threads, CPU
    python bench/bench_train.py --quick                  # seconds: xs, 1 thread, small batch
    python bench/bench_train.py --device cuda --sizes s  # on a GPU (bf16 autocast)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from provenance import RESULTS_DIR, run_record, write_results

from mmst.cli_help import ArgumentParser

#: The source paths this benchmark exercises (recorded with their digests in ``provenance.depends_on``).
DEPENDS_ON = (
    "bench/bench_train.py",
    "mmst/models/",
    "mmst/training/",
    "mmst/data/",
    "mmst/losses.py",
    "mmst/features.py",
    "mmst/corpora/speed_perturb.py",
)

LANGS8 = ["de", "es", "fr", "it", "nl", "pt", "ro", "ru"]


def peak_matmul_gflops(threads: int, device: str, n: int = 2048, min_s: float = 0.5,
                       dtype: torch.dtype | None = None) -> float:
    """Measured peak matmul rate (GFLOP/s): best of 3 timings of repeated ``n x n @ n x n`` products.

    ``dtype``: that of the training step's matmuls (default fp32 on CPU, bf16 on CUDA). 1 product =
    ``2 n^3`` FLOPs.
    """
    torch.set_num_threads(threads)
    if dtype is None:
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    torch.mm(a, b, out=c)
    sync()
    t0 = time.perf_counter()
    torch.mm(a, b, out=c)
    sync()
    one = max(time.perf_counter() - t0, 1e-6)
    reps = max(1, int(min_s / 3 / one))
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        sync()
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0))
    return best / 1e9


def synthetic_batch(frames: int, utt_frames: int, langs: list[str], vocab: int, src_vocab: int,
                    tokens_per_s: float, seed: int = 0):
    """A collated :class:`mmst.data.batching.Batch` of ~``frames`` padded frames (B = frames // utt_frames
    utterances, lengths 80-100% of ``utt_frames``), random CMVN-like features, ``tokens_per_s`` target
    tokens per second of speech for each language and for the English CTC transcript."""
    from mmst.data.batching import collate

    g = torch.Generator().manual_seed(seed)
    b = max(1, frames // utt_frames)
    tags = {lang: 4 + j for j, lang in enumerate(langs)}
    items = []
    for i in range(b):
        n = int(utt_frames * (0.8 + 0.2 * i / max(b - 1, 1)))
        n_tok = max(1, int(round(n / 100 * tokens_per_s)))
        items.append({"index": i, "id": f"u{i}", "fbank": torch.randn(n, 80, generator=g),
                      "tokens": {lang: torch.randint(4 + len(langs), vocab, (n_tok,), generator=g).tolist()
                                 for lang in langs},
                      "src_tokens": torch.randint(4, src_vocab, (n_tok,), generator=g).tolist()})
    return collate(items, langs, tags)


def data_batches(data_dir: str, langs: list[str] | None, max_tokens: int, n: int):
    """Up to ``n`` real batches of ``DATA/train.tsv`` (length-bucketed by ``max_tokens`` frames) and the
    loader seconds spent producing them."""
    from mmst.data.batching import make_batches
    from mmst.data.dataset import MultiwayDataset

    ds = MultiwayDataset(data_dir, "train", tgt_langs=langs)
    lengths = [int(x) for x in ds.n_frames]
    idx = make_batches(lengths, max_tokens, seed=1)[:n]
    t0 = time.perf_counter()
    out = [ds.collater([ds[i] for i in bi]) for bi in idx]
    return out, time.perf_counter() - t0, list(ds.tgt_langs)


def build(size: str, arch: str, langs: list[str], vocab: int, src_vocab: int, attention: str = "chunk-causal"):
    """A freshly initialised model of ``size`` (seed 0)."""
    from mmst.models import build_model, model_config_for_size

    torch.manual_seed(0)
    kw: dict[str, Any] = {"vocab_size": vocab, "src_vocab_size": src_vocab, "encoder_attention": attention}
    if arch == "unified":
        kw["lang_tag_ids"] = {lang: 4 + j for j, lang in enumerate(langs)}
    return build_model(model_config_for_size(size, arch=arch, tgt_langs=langs, **kw))


def count_update_flops(model, criterion, batch, waitk: int | None, precision: str = "auto") -> float:
    """Forward + backward FLOPs of one micro-batch (FlopCounterMode), in FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    from mmst.training.step import compute_loss

    model.train()
    with FlopCounterMode(display=False) as fc:
        loss, _ = compute_loss(model, batch, criterion, waitk, precision=precision)
        (loss / 1000).backward()
    model.zero_grad(set_to_none=True)
    return float(fc.get_total_flops())


def augmentation_cost(batch, policy: str, seed: int = 1) -> dict[str, float]:
    """Seconds to augment the utterances of one collated batch, per utterance as the data pipeline does.

    * ``specaugment_s``: :class:`mmst.data.augment.FeatureAugment` (SpecAugment ``policy``) on every
      utterance's ``(T, 80)`` features (what ``MultiwayDataset.__getitem__`` adds in training);
    * ``speed_onthefly_s``: what ON-THE-FLY speed perturbation would add: soxr resampling of a
      waveform of the utterance's length (factors 0.9 and 1.1 alternating) plus fbank of the result
      (audio reading not counted). The toolkit makes prep-time copies instead (mmst.corpora.speed_perturb);
      this figure is why.
    """
    import numpy as np

    from mmst.corpora.speed_perturb import speed_perturb
    from mmst.data.augment import FeatureAugment, specaugment_from_config
    from mmst.features import fbank

    aug = FeatureAugment(specaugment_from_config(policy), seed)
    feats = [batch.fbank[j, : int(batch.fbank_lengths[j])].cpu() for j in range(batch.size)]
    t0 = time.perf_counter()
    for j, f in enumerate(feats):
        aug(f, 1, j)
    t_spec = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    waves = [(0.1 * rng.standard_normal(int(f.shape[0]) * 160 + 240)).astype(np.float32) for f in feats]
    t0 = time.perf_counter()
    for j, w in enumerate(waves):
        fbank(speed_perturb(w, 0.9 if j % 2 else 1.1))
    return {"specaugment_s": t_spec, "speed_onthefly_s": time.perf_counter() - t0}


def run_one(args: argparse.Namespace, size: str, threads: int, precision: str = "auto") -> dict[str, Any]:
    """Measure one configuration in this process; returns a result dict."""
    from mmst.losses import MultilingualCriterion
    from mmst.training.optim import InverseSqrtSchedule, build_optimizer
    from mmst.training.step import autocast_dtype
    from mmst.training.strategy import SingleProcessStrategy

    torch.set_num_threads(threads)
    device = args.device
    langs = LANGS8[: args.langs]
    loader_s = 0.0
    if args.data:
        batches, loader_s, langs = data_batches(args.data, None, args.frames, args.warmup + args.updates)
    else:
        batches = [synthetic_batch(args.frames, args.utt_frames, langs, args.vocab, args.src_vocab,
                                   args.tokens_per_s, seed=i) for i in range(min(3, args.warmup + args.updates))]
    model = build(size, args.arch, langs, args.vocab, args.src_vocab).to(device)
    if args.compile:
        model = torch.compile(model)
    crit = MultilingualCriterion(ctc_weight=0.3)
    opt = build_optimizer(model.parameters(), 1e-4, [0.9, 0.98], implementation=args.optimizer)
    sched = InverseSqrtSchedule(opt, 1e-4, 1000)
    strat = SingleProcessStrategy(precision)
    mm_dtype = autocast_dtype(device, precision) or torch.float32
    batches = [b.to(device) for b in batches]

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    gpu_peak_gflops = peak_matmul_gflops(threads, device, args.peak_n, dtype=mm_dtype)
    flops = [count_update_flops(model, crit, b, args.waitk, precision) for b in batches[:1]]
    for i in range(args.warmup):
        strat.run_update(model, crit, opt, sched, [batches[i % len(batches)]], [args.waitk], 10.0)
    sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, frames, tokens, padded = [], 0, 0, 0
    n_flop = 0.0
    for i in range(args.updates):
        b = batches[(args.warmup + i) % len(batches)]
        t0 = time.perf_counter()
        strat.run_update(model, crit, opt, sched, [b], [args.waitk], 10.0)
        sync()
        times.append(time.perf_counter() - t0)
        frames += b.n_frames
        tokens += b.total_ntokens
        padded += b.fbank.shape[0] * b.fbank.shape[1]
        n_flop += flops[0] * b.n_frames / batches[0].n_frames if args.data else flops[0]
    dt = sum(times)
    # the peak is a best-of measurement: take it again after the timed updates, so a slice of CPU time
    # lost to another process during the first measurement cannot make the peak too low (and MFU > 100%)
    gpu_peak_gflops = max(gpu_peak_gflops, peak_matmul_gflops(threads, device, args.peak_n, dtype=mm_dtype))
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=acts, record_shapes=False) as prof:
            strat.run_update(model, crit, opt, sched, [batches[0]], [args.waitk], 10.0)
            sync()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        Path(args.profile).write_text(table + "\n")
        print(table, file=sys.stderr)
    res = {
        "size": size, "arch": args.arch, "threads": threads, "device": device, "compile": args.compile,
        "precision": precision, "matmul_dtype": str(mm_dtype).replace("torch.", ""), "optimizer": args.optimizer,
        "params": sum(p.numel() for p in model.parameters()), "langs": len(langs),
        "batch_utts": batches[0].size, "batch_frames": batches[0].n_frames,
        "batch_tokens": batches[0].total_ntokens, "updates": args.updates,
        "s_per_update": dt / args.updates, "s_per_update_min": min(times), "s_per_update_max": max(times),
        "frames_per_s": frames / dt, "tokens_per_s": tokens / dt, "padding_pct": 100 * (1 - frames / padded),
        "model_gflop_per_update": flops[0] / 1e9, "achieved_gflops": n_flop / dt / 1e9,
        "peak_gflops": gpu_peak_gflops, "mfu": n_flop / dt / 1e9 / gpu_peak_gflops,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if args.specaugment != "none":
        cost = augmentation_cost(batches[0].to("cpu"), args.specaugment)
        step_s = dt / args.updates * batches[0].n_frames / max(frames / args.updates, 1)  # batch 0's share
        res.update(specaugment=args.specaugment, specaugment_s_per_batch=cost["specaugment_s"],
                   specaugment_pct=100 * cost["specaugment_s"] / step_s,
                   speed_onthefly_s_per_batch=cost["speed_onthefly_s"],
                   speed_onthefly_pct=100 * cost["speed_onthefly_s"] / step_s)
    if args.data:
        res["loader_wait_pct"] = 100 * loader_s / (loader_s + dt)
    if device == "cuda":
        res["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return res


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(description=__doc__)
    p.add_argument("--sizes", nargs="+", default=["xs", "s"], help="model sizes")
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2], help="torch CPU thread counts")
    p.add_argument("--arch", default="unified", choices=["unified", "separate"], help="model architecture")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (cuda when available)")
    p.add_argument("--frames", type=int, default=20000, help="padded fbank frames per batch (10 ms each)")
    p.add_argument("--utt-frames", type=int, default=500, help="longest utterance in frames (synthetic)")
    p.add_argument("--langs", type=int, default=4, help="target languages (synthetic)")
    p.add_argument("--vocab-size", dest="vocab", type=int, default=1000, help="joint target vocabulary size")
    p.add_deprecated_alias("--vocab", "--vocab-size")
    p.add_argument("--src-vocab-size", dest="src_vocab", type=int, default=500, help="source (CTC) vocabulary size")
    p.add_deprecated_alias("--src-vocab", "--src-vocab-size")
    p.add_argument("--tokens-per-s", type=float, default=4.0, help="target tokens per second of speech")
    p.add_argument("--waitk-lagging", dest="waitk", type=int, default=3, help="wait-k of the training mask (0 = offline)")
    p.add_deprecated_alias("--waitk", "--waitk-lagging")
    p.add_argument("--updates", type=int, default=3, help="timed updates per configuration")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up updates")
    p.add_argument("--peak-n", type=int, default=2048, help="matrix size of the peak matmul measurement")
    p.add_argument("--precision", nargs="+", default=None, choices=["auto", "fp32", "bf16"],
                   help="forward precision(s) (mmst-train's --precision): fp32, bf16 autocast, or auto (bf16 on "
                        "CUDA, fp32 on CPU). MFU is relative to the matmul peak at the same dtype. Default: "
                        "fp32 and bf16 on CPU, auto on CUDA")
    p.add_argument("--optimizer", default="fused", choices=["fused", "foreach", "for-loop"],
                   help="AdamW implementation (mmst-train's optim.implementation)")
    p.add_argument("--specaugment", default="LB", choices=["none", "LB", "LD", "SM", "SS"],
                   help="augmentation row: cost of SpecAugment with this policy on one batch, and of on-the-fly "
                        "speed perturbation (soxr + fbank), as %% of the update time ('none' = skip)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--data", default=None, help="DATA dir: use real batches of DATA/train.tsv")
    p.add_argument("--omp-wait-policy", default="PASSIVE",
                   help="OMP_WAIT_POLICY of the measuring processes ('' = inherit). PASSIVE avoids the 10-40x "
                        "slowdown of spinning OpenMP threads on a shared/oversubscribed machine (bench/NOTES.md)")
    p.add_argument("--profile", default=None, help="write a torch.profiler table of one update to this file")
    p.add_argument("--quick", action="store_true", help="smoke test: xs, 1 thread, 2000 frames, 1 update")
    p.add_argument("--out", default=str(RESULTS_DIR / "train.json"),
                   help="JSON output (default docs/results/train.json)")
    p.add_argument("--worker", nargs=3, metavar=("SIZE", "THREADS", "PRECISION"), help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: run each (size, threads) in a subprocess, print a table, write JSON."""
    args = build_parser().parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.waitk == 0:
        args.waitk = None
    if args.quick:
        args.sizes, args.threads, args.frames, args.utt_frames, args.updates, args.warmup = ["xs"], [1], 2000, 300, 1, 1
        args.peak_n = 1024
        args.precision = args.precision or ["fp32"]
    if args.precision is None:
        args.precision = ["auto"] if args.device == "cuda" else ["fp32", "bf16"]
    if args.worker:
        print("RESULT " + json.dumps(run_one(args, args.worker[0], int(args.worker[1]), args.worker[2])))
        return 0
    base = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--quick"]
    if args.quick:
        base += ["--frames", str(args.frames), "--utt-frames", str(args.utt_frames), "--updates", "1",
                 "--warmup", "1", "--peak-n", "1024"]
    from mmst.training.step import bf16_warning

    results, skipped, bugs = [], [], []
    t_start = time.perf_counter()
    for size in args.sizes:
        for th in args.threads:
            for prec in args.precision:
                slow_bf16 = bf16_warning(args.device, prec)
                if slow_bf16:  # the peak torch.mm and the model would not take the same (emulated) path
                    print(f"  {size} {th}t {prec}: skipped: {slow_bf16}", flush=True)
                    skipped.append({"size": size, "threads": th, "precision": prec, "reason": slow_bf16})
                    continue
                env = dict(os.environ, OMP_NUM_THREADS=str(th), MKL_NUM_THREADS=str(th))
                if args.omp_wait_policy:
                    env["OMP_WAIT_POLICY"] = args.omp_wait_policy
                cmd = [sys.executable, __file__, *base, "--worker", size, str(th), prec]
                r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
                if r.returncode or not line:
                    print(f"error: {size}/{th} threads/{prec} failed:\n{r.stderr[-2000:]}", file=sys.stderr)
                    return 1
                res = json.loads(line[-1][7:])
                if res["mfu"] > 1.0:  # cannot happen when FLOPs and peak are measured right: report, not print
                    msg = (f"BUG: MFU {100 * res['mfu']:.0f}% > 100% for {size}/{th} threads/{prec}: the model "
                           f"FLOPs or the peak ({res['peak_gflops']:.1f} GFLOP/s, {res['matmul_dtype']}) are wrong")
                    print(msg, file=sys.stderr, flush=True)
                    bugs.append(msg)
                    res["mfu_invalid"], res["mfu"] = res["mfu"], None
                results.append(res)
                mfu = "invalid (see BUG)" if res["mfu"] is None else f"{100 * res['mfu']:.1f}%"
                print(f"  {size} {th}t {prec}: {res['s_per_update']:.2f} s/update, MFU {mfu}", flush=True)
    meta = {"torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "device": args.device, "loadavg_1min": os.getloadavg()[0],
            "frames_per_batch": args.frames, "utt_frames": args.utt_frames, "langs": args.langs,
            "vocab": args.vocab, "waitk": args.waitk, "omp_wait_policy": args.omp_wait_policy, "data": args.data, "runtime_s": time.perf_counter() - t_start,
            "skipped": skipped, "bugs": bugs}
    print(f"bench_train: {args.arch}, {args.langs} langs, vocab {args.vocab}, ~{args.frames} frames/batch, "
          f"device {args.device}, torch {torch.__version__}")
    print("| size | params | threads | precision | s/update | frames/s | tokens/s | GFLOP/update | GFLOP/s | "
          "peak GFLOP/s (same dtype) | MFU | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['size']} | {r['params'] / 1e6:.1f}M | {r['threads']} | {r['precision']} | {r['s_per_update']:.2f} | "
              f"{r['frames_per_s']:.0f} | {r['tokens_per_s']:.0f} | {r['model_gflop_per_update']:.1f} | "
              f"{r['achieved_gflops']:.1f} | {r['peak_gflops']:.1f} | "
              f"{'BUG (>100%)' if r['mfu'] is None else format(100 * r['mfu'], '.1f') + '%'} | {r['peak_rss_mb']:.0f} |")
    for sk in skipped:
        print(f"skipped {sk['size']} {sk['threads']}t {sk['precision']}: {sk['reason']}")
    if any("specaugment_pct" in r for r in results):
        print()
        print("Augmentation cost per batch (per utterance, on CPU, as in the data pipeline), % of the update time:")
        print("| size | threads | precision | batch utts | SpecAugment | ms | % of update | on-the-fly speed "
              "perturbation (soxr + fbank) ms | % of update |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in results:
            if "specaugment_pct" in r:
                print(f"| {r['size']} | {r['threads']} | {r['precision']} | {r['batch_utts']} | {r['specaugment']} | "
                      f"{1000 * r['specaugment_s_per_batch']:.1f} | {r['specaugment_pct']:.2f}% | "
                      f"{1000 * r['speed_onthefly_s_per_batch']:.0f} | {r['speed_onthefly_pct']:.1f}% |")
    write_results(args.out, {"provenance": run_record(depends_on=DEPENDS_ON), "meta": meta, "results": results})
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
