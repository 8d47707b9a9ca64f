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
80-100% to produce realistic padding), ``--num-langs`` target languages with ``--tokens-per-s`` target
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
import itertools
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from typing import Any

import torch
from provenance import RESULTS_DIR, run_record, write_results

from mmst.cli_help import ArgumentParser

#: The paths this benchmark runs without importing them; the repository modules that it and its child processes
#: import are recorded at run time (``provenance.depends_on``, bench/provenance.py).
DEPENDS_ON = ("bench/bench_train.py",)

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


def cuda_environment() -> dict[str, Any]:
    """The GPU's name, compute capability, memory (GiB), CUDA and cuDNN versions and the driver's
    (``nvidia-smi``, when on PATH); ``{}`` without CUDA."""
    if not torch.cuda.is_available():
        return {}
    prop = torch.cuda.get_device_properties(0)
    env: dict[str, Any] = {"gpu": prop.name, "gpu_capability": f"{prop.major}.{prop.minor}",
                           "gpu_memory_gib": prop.total_memory / 2**30, "gpu_count": torch.cuda.device_count(),
                           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        env["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        env["driver"] = None
    return env


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
    """Up to ``n`` real batches of ``DATA/train.tsv`` (length-bucketed by ``max_tokens`` frames), the
    loader seconds spent producing them, the languages, and ``make(i)``: batch ``i`` read and collated
    again (the loader's work, for the profile)."""
    from mmst.data.batching import make_batches
    from mmst.data.dataset import MultiwayDataset

    ds = MultiwayDataset(data_dir, "train", tgt_langs=langs)
    lengths = [int(x) for x in ds.n_frames]
    idx = make_batches(lengths, max_tokens, seed=1)[:n]

    def make(i: int):
        return ds.collater([ds[j] for j in idx[i % len(idx)]])

    t0 = time.perf_counter()
    out = [make(i) for i in range(len(idx))]
    return out, time.perf_counter() - t0, list(ds.tgt_langs), make


#: op-name patterns of the matrix products (forward and backward): dense, batched, convolutions, attention
_MATMUL = re.compile(r"(^|::|_)(mm|addmm|bmm|baddbmm|matmul|linear|conv\w*|convolution\w*|_int_mm|"
                     r"\w*scaled_dot_product\w*|\w*flash_attention\w*|\w*efficient_attention\w*|mkldnn_\w*)$")
#: autograd nodes of the loss (label-smoothed CE and CTC): their kernels count as loss
_LOSS_BACKWARD = ("LogSoftmaxBackward", "GatherBackward", "CtcLossBackward", "IndexBackward", "MaskedSelectBackward")


def classify_op(name: str, ancestors: list[str]) -> str:
    """The share an op's self time goes to: ``data`` (under ``record_function("data")``), ``optimizer``
    (under ``Optimizer.step``), ``loss`` (under ``record_function("loss")`` or a loss autograd node),
    ``matmul`` (:data:`_MATMUL`), else ``elementwise`` (norms, dropout, activations, residuals, masks,
    copies, the rest of autograd)."""
    for a in ancestors:
        if a == "data":
            return "data"
        if a.startswith("Optimizer.step") or a.startswith("Optimizer.zero_grad"):
            return "optimizer"
        if a == "loss" or (a.startswith("autograd::engine::evaluate_function") and any(k in a for k in _LOSS_BACKWARD)):
            return "loss"
    if name.startswith("Optimizer.step"):
        return "optimizer"
    return "matmul" if _MATMUL.search(name) else "elementwise"


def profile_shares(events, device_time: bool = False, top: int = 15) -> dict[str, Any]:
    """``{"shares": {category: fraction of the self time}, "top_ops": [{name, self_ms, calls, category}],
    "total_ms"}`` from ``torch.profiler`` events (``prof.events()``); ``device_time``: CUDA kernel time
    instead of CPU self time."""
    per_op: dict[tuple[str, str], list] = {}
    shares: dict[str, float] = dict.fromkeys(("matmul", "elementwise", "loss", "optimizer", "data"), 0.0)
    for ev in events:
        t = float(getattr(ev, "self_device_time_total", 0.0) if device_time else ev.self_cpu_time_total)
        if t <= 0:
            continue
        anc, p = [], ev.cpu_parent
        while p is not None:
            anc.append(p.name)
            p = p.cpu_parent
        cat = classify_op(ev.name, [ev.name, *anc] if ev.name in ("data", "loss") else anc)
        shares[cat] += t
        row = per_op.setdefault((ev.name, cat), [0.0, 0])  # an op (copy_, sum) may serve several shares
        row[0] += t
        row[1] += 1
    total = sum(shares.values()) or 1.0
    ops = sorted(per_op.items(), key=lambda kv: -kv[1][0])[:top]
    return {"shares": {k: v / total for k, v in shares.items()}, "total_ms": total / 1000.0,
            "top_ops": [{"name": n, "self_ms": v[0] / 1000.0, "calls": v[1], "category": c} for (n, c), v in ops]}


class _LossScope:
    """A criterion whose calls run under ``record_function("loss")`` (for the profile)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __call__(self, out, batch):
        from torch.profiler import record_function

        with record_function("loss"):
            return self.inner(out, batch)


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


def run_one(args: argparse.Namespace, size: str, threads: int, precision: str = "auto",
            compile_mode: str = "false") -> dict[str, Any]:
    """Measure one configuration in this process; returns a result dict."""
    from mmst.losses import MultilingualCriterion
    from mmst.training.compile import TrainingCompiler
    from mmst.training.optim import InverseSqrtSchedule, build_optimizer
    from mmst.training.step import autocast_dtype
    from mmst.training.strategy import SingleProcessStrategy

    torch.set_num_threads(threads)
    device = args.device
    langs = LANGS8[: args.langs]
    loader_s = 0.0
    if args.data:
        batches, loader_s, langs, make_batch = data_batches(args.data, None, args.frames, args.warmup + args.updates)
    else:
        def make_batch(i: int):
            return synthetic_batch(args.frames, args.utt_frames, langs, args.vocab, args.src_vocab,
                                   args.tokens_per_s, seed=i % args.distinct_batches)

        batches = [synthetic_batch(args.frames, args.utt_frames, langs, args.vocab, args.src_vocab,
                                   args.tokens_per_s, seed=i)
                   for i in range(min(args.distinct_batches, args.warmup + args.updates))]
    model = build(size, args.arch, langs, args.vocab, args.src_vocab).to(device)
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
    # mmst-train's compile key; true: one graph per (length-bucketed) batch shape, give --warmup >= the
    # number of distinct batches so that the compiling happens before the timed updates
    compiler = TrainingCompiler(compile_mode, model, crit, device)
    batches = [compiler.prepare(b) for b in batches]
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
    prof_res = None
    if args.profile:  # a few more updates under torch.profiler, each drawing its batch inside "data"
        from torch.profiler import ProfilerActivity, profile, record_function

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        scoped = _LossScope(crit)
        with profile(activities=acts, record_shapes=False) as prof:
            t_prof = time.perf_counter()
            for i in range(args.profile_updates):
                with record_function("data"):
                    b = compiler.prepare(make_batch(i)).to(device)
                strat.run_update(model, scoped, opt, sched, [b], [args.waitk], 10.0)
                sync()
            prof_wall = time.perf_counter() - t_prof
        prof_res = profile_shares(prof.events(), device_time=device == "cuda", top=args.profile_top)
        # wall time of the profiled updates (profiler overhead included): the part not inside any op's self
        # time is Python, autograd bookkeeping and the profiler itself, all on the main thread
        prof_res.update(updates=args.profile_updates, wall_ms=1000 * prof_wall, data_source="DATA loader" if args.data else "synthetic",
                        time="CUDA kernel" if device == "cuda" else "CPU self")
    res = {
        "size": size, "arch": args.arch, "threads": threads, "device": device, "compile": compile_mode,
        "compile_in_effect": str(compiler.mode).lower(), "compile_graphs": compiler.graphs,
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
    if prof_res is not None:
        res["profile"] = prof_res
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
    p.add_argument("--num-langs", dest="langs", type=int, default=4, help="number of target languages (synthetic)")
    p.add_deprecated_alias("--langs", "--num-langs")
    p.add_argument("--vocab-size", dest="vocab", type=int, default=1000, help="joint target vocabulary size")
    p.add_deprecated_alias("--vocab", "--vocab-size")
    p.add_argument("--src-vocab-size", dest="src_vocab", type=int, default=500, help="source (CTC) vocabulary size")
    p.add_deprecated_alias("--src-vocab", "--src-vocab-size")
    p.add_argument("--tokens-per-s", type=float, default=4.0, help="target tokens per second of speech")
    p.add_argument("--waitk-lagging", dest="waitk", type=int, default=3, help="wait-k of the training mask (0 = offline)")
    p.add_deprecated_alias("--waitk", "--waitk-lagging")
    p.add_argument("--updates", type=int, default=3, help="timed updates per configuration")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up updates")
    p.add_argument("--distinct-batches", type=int, default=3,
                   help="synthetic batches cycled through (each one shape: a compiled row compiles each once)")
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
    p.add_argument("--compile", nargs="+", default=["false"], choices=["false", "true", "blocks"],
                   help="mmst-train's compile key (true: the model, dynamic=False, one graph per length-bucketed "
                        "batch shape; blocks: the elementwise blocks and the loss); several values = one row each")
    p.add_argument("--data", default=None, help="DATA dir: use real batches of DATA/train.tsv")
    p.add_argument("--omp-wait-policy", default="PASSIVE",
                   help="OMP_WAIT_POLICY of the measuring processes ('' = inherit). PASSIVE avoids the 10-40x "
                        "slowdown of spinning OpenMP threads on a shared/oversubscribed machine (bench/NOTES.md)")
    p.add_argument("--profile", action="store_true",
                   help="also profile --profile-updates updates of each row (torch.profiler): print the top ops by "
                        "self time and the shares of matmul, elementwise, loss, optimizer and data; the JSON "
                        "(default docs/results/train_profile.json) gets a 'profile' per row")
    p.add_argument("--profile-updates", type=int, default=3, help="updates profiled per row")
    p.add_argument("--profile-top", type=int, default=15, help="ops kept per profiled row (by self time)")
    p.add_argument("--quick", action="store_true", help="smoke test: xs, 1 thread, 2000 frames, 1 update")
    p.add_argument("--out", default=None,
                   help="JSON output (default docs/results/train.json; with --profile docs/results/train_profile.json)")
    p.add_argument("--worker", nargs=4, metavar=("SIZE", "THREADS", "PRECISION", "COMPILE"), help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: run each (size, threads) in a subprocess, print a table, write JSON."""
    args = build_parser().parse_args(argv)
    if args.out is None:
        args.out = str(RESULTS_DIR / ("train_profile.json" if args.profile else "train.json"))
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
        print("RESULT " + json.dumps(run_one(args, args.worker[0], int(args.worker[1]), args.worker[2],
                                             args.worker[3])))
        return 0
    record = run_record(depends_on=DEPENDS_ON)  # at the start: the code that runs (the workers add their imports)
    base = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--quick"]
    if args.quick:
        base += ["--frames", str(args.frames), "--utt-frames", str(args.utt_frames), "--updates", "1",
                 "--warmup", "1", "--peak-n", "1024"]
    from mmst.training.step import bf16_warning

    results, skipped, bugs = [], [], []
    t_start = time.perf_counter()
    for size, th, prec, comp in itertools.product(args.sizes, args.threads, args.precision, args.compile):
        slow_bf16 = bf16_warning(args.device, prec)
        if slow_bf16:  # the peak torch.mm and the model would not take the same (emulated) path
            print(f"  {size} {th}t {prec}: skipped: {slow_bf16}", flush=True)
            skipped.append({"size": size, "threads": th, "precision": prec, "compile": comp, "reason": slow_bf16})
            continue
        env = dict(os.environ, OMP_NUM_THREADS=str(th), MKL_NUM_THREADS=str(th))
        if args.omp_wait_policy:
            env["OMP_WAIT_POLICY"] = args.omp_wait_policy
        cmd = [sys.executable, __file__, *base, "--worker", size, str(th), prec, comp]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        if r.returncode or not line:
            print(f"error: {size}/{th} threads/{prec}/compile {comp} failed:\n{r.stderr[-2000:]}", file=sys.stderr)
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
        print(f"  {size} {th}t {prec} compile={comp}: {res['s_per_update']:.2f} s/update, MFU {mfu}", flush=True)
    meta = {"torch": torch.__version__, "cpu": platform.processor() or platform.machine(), **cuda_environment(),
            "cpu_count": os.cpu_count(), "device": args.device, "loadavg_1min": os.getloadavg()[0],
            "frames_per_batch": args.frames, "utt_frames": args.utt_frames, "langs": args.langs,
            "vocab": args.vocab, "waitk": args.waitk, "omp_wait_policy": args.omp_wait_policy, "data": args.data, "runtime_s": time.perf_counter() - t_start,
            "skipped": skipped, "bugs": bugs}
    print(f"bench_train: {args.arch}, {args.langs} langs, vocab {args.vocab}, ~{args.frames} frames/batch, "
          f"device {args.device}, torch {torch.__version__}")
    print("| size | params | threads | precision | compile | s/update | frames/s | tokens/s | GFLOP/update | GFLOP/s | "
          "peak GFLOP/s (same dtype) | MFU | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['size']} | {r['params'] / 1e6:.1f}M | {r['threads']} | {r['precision']} | {r['compile']} | "
              f"{r['s_per_update']:.2f} | "
              f"{r['frames_per_s']:.0f} | {r['tokens_per_s']:.0f} | {r['model_gflop_per_update']:.1f} | "
              f"{r['achieved_gflops']:.1f} | {r['peak_gflops']:.1f} | "
              f"{'BUG (>100%)' if r['mfu'] is None else format(100 * r['mfu'], '.1f') + '%'} | {r['peak_rss_mb']:.0f} |")
    for sk in skipped:
        print(f"skipped {sk['size']} {sk['threads']}t {sk['precision']}: {sk['reason']}")
    for r in results:
        if "profile" in r:
            pr = r["profile"]
            print(f"\nProfile of {r['size']} {r['threads']}t {r['precision']} compile={r['compile']} "
                  f"({pr['updates']} updates, {pr['time']} time, {pr['total_ms']:.0f} ms; data: {pr['data_source']}):")
            print("shares: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in pr["shares"].items()))
            print("| op | self ms | calls | share |")
            print("|---|---|---|---|")
            for op in pr["top_ops"]:
                print(f"| {op['name']} | {op['self_ms']:.1f} | {op['calls']} | {op['category']} |")
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
    write_results(args.out, {"provenance": record, "meta": meta, "results": results})
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
