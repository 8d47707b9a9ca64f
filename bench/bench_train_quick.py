"""Quick training-throughput measurement (frames/s) for the ``xs`` and ``s`` models.

Times full training updates (forward + backward + clip + AdamW step, via
``mmst.training.strategy.SingleProcessStrategy``, the code path of ``mmst-train``) on synthetic
batches: B utterances of T fbank frames (10 ms each), 4 target languages with L tokens each, joint vocab V,
CTC on (optional). Reports valid input frames per second of wall time (after warm-up updates).
With ``--data DATA`` it uses real batches from ``DATA/train.tsv`` instead (bucketing by ``--max-tokens``).

Example::

    python bench/bench_train_quick.py --sizes xs s --threads 2 --updates 5 --out docs/results/train_quick.json
"""

from __future__ import annotations

import platform
import time

import torch
from provenance import run_record, write_results
from tqdm import tqdm

from mmst.cli_help import ArgumentParser
from mmst.data.batching import collate
from mmst.losses import MultilingualCriterion
from mmst.models import build_model, model_config_for_size
from mmst.training.optim import InverseSqrtSchedule, build_optimizer
from mmst.training.strategy import SingleProcessStrategy

#: The paths this benchmark runs without importing them; the repository modules that it and its child processes
#: import are recorded at run time (``provenance.depends_on``, bench/provenance.py).
DEPENDS_ON = ("bench/bench_train_quick.py",)

LANGS = ["de", "es", "fr", "ja"]


def synthetic_batch(b: int, t: int, tgt_len: int, vocab: int, src_vocab: int, seed: int = 0):
    """A collated :class:`mmst.data.batching.Batch` of random features and tokens."""
    g = torch.Generator().manual_seed(seed)
    items = []
    for i in range(b):
        n = int(t * (0.8 + 0.2 * i / max(b - 1, 1)))
        items.append({"index": i, "id": f"u{i}", "fbank": torch.randn(n, 80, generator=g),
                      "tokens": {lang: torch.randint(4 + len(LANGS), vocab, (tgt_len,), generator=g).tolist()
                                 for lang in LANGS},
                      "src_tokens": torch.randint(4, src_vocab, (tgt_len,), generator=g).tolist()})
    return collate(items, LANGS, {lang: 4 + j for j, lang in enumerate(LANGS)})


def bench_size(size: str, arch: str, batch, updates: int, warmup: int, ctc: bool) -> dict:
    """Time ``updates`` updates of ``size`` on ``batch``; returns a result dict."""
    torch.manual_seed(0)
    cfg = model_config_for_size(size, arch=arch, tgt_langs=LANGS, vocab_size=1000,
                                lang_tag_ids={lang: 4 + j for j, lang in enumerate(LANGS)} if arch == "unified" else None,
                                src_vocab_size=500 if ctc else 0)
    model = build_model(cfg)
    crit = MultilingualCriterion(ctc_weight=0.3 if ctc else 0.0)
    opt = build_optimizer(model.parameters(), 1e-3, [0.9, 0.98])
    sched = InverseSqrtSchedule(opt, 1e-3, 100)
    strat = SingleProcessStrategy()
    for _ in range(warmup):
        strat.run_update(model, crit, opt, sched, [batch], [3], 10.0)
    t0 = time.perf_counter()
    for _ in tqdm(range(updates), desc=f"{size}/{arch}", leave=False):
        strat.run_update(model, crit, opt, sched, [batch], [3], 10.0)
    dt = time.perf_counter() - t0
    frames = batch.n_frames * updates
    return {"size": size, "arch": arch, "params": sum(p.numel() for p in model.parameters()),
            "batch_utts": batch.size, "batch_frames": batch.n_frames, "updates": updates,
            "seconds": round(dt, 3), "frames_per_s": round(frames / dt, 1), "ctc": ctc}


def build_parser() -> ArgumentParser:
    """Command-line options."""
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", nargs="+", default=["xs", "s"], help="model sizes to time")
    ap.add_argument("--arch", default="unified", choices=["unified", "separate"], help="model architecture")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--batch", type=int, default=16, help="utterances per batch (synthetic)")
    ap.add_argument("--frames", type=int, default=300, help="max frames per utterance (synthetic; 10 ms each)")
    ap.add_argument("--tgt-len", type=int, default=20, help="target tokens per language (synthetic)")
    ap.add_argument("--updates", type=int, default=10, help="timed updates per size")
    ap.add_argument("--warmup", type=int, default=3, help="untimed warm-up updates")
    ap.add_argument("--no-ctc", action="store_true", help="disable the CTC head/loss")
    ap.add_argument("--out", default=None, help="write results as JSON here")
    return ap


def main(argv: list[str] | None = None) -> None:
    """CLI entry point."""
    args = build_parser().parse_args(argv)
    record = run_record(depends_on=DEPENDS_ON)  # at the start: the code that runs
    torch.set_num_threads(args.threads)
    batch = synthetic_batch(args.batch, args.frames, args.tgt_len, 1000, 500)
    results = [bench_size(s, args.arch, batch, args.updates, args.warmup, not args.no_ctc) for s in args.sizes]
    meta = {"torch": torch.__version__, "threads": args.threads, "cpu": platform.processor() or platform.machine(),
            "device": "cpu"}
    for r in results:
        print(f"{r['size']:>3} {r['arch']}: {r['params'] / 1e6:.1f}M params, {r['frames_per_s']:.0f} frames/s "
              f"({r['batch_frames']} frames/update, {r['seconds'] / r['updates']:.2f} s/update)")
    if args.out:
        write_results(args.out, {"provenance": record, "meta": meta, "results": results})


if __name__ == "__main__":
    main()
