#!/usr/bin/env python
"""mmst vs fairseq ``s2t_transformer_s``: training throughput and dev loss, same data, same run.

Needs the optional extra ``[fairseq]`` (``fairseq-fixed==0.12.3.1``); without it the benchmark prints
a message and exits 0 (``"skipped"`` in the JSON).

Method:

1. DATA: ``--data DATA`` (our data-pipeline output), or a synthetic feature-space corpus
   (:func:`mmst.corpora.feature_corpus.build_feature_corpus`, 3 languages; English "speech" of word templates)
   written under ``--work``.
2. fairseq inputs are derived from DATA: every utterance's fbank is written as ``.npy`` (raw; CMVN
   via fairseq's ``global_cmvn`` transform with our ``gcmvn.npz``), speech_to_text manifests
   ``train_st.tsv`` / ``dev_st.tsv`` (id, audio, n_frames, tgt_text, speaker) for ONE target
   language (``--tgt-langs``, one), the vocab txt of our joint SentencePiece model (same ids: bos 0, pad 1,
   eos 2, unk 3, then pieces) and a ``config.yaml``.
3. Models: fairseq ``s2t_transformer_s`` (d 256, 12/6 layers, 4 heads, FFN 2048, conv 1024,
   tied decoder embeddings) and our ``s`` model (``separate`` arch, one language, same vocab, offline
   encoder and ``waitk=None`` so that both train the same task); parameter counts are compared
   (goal within 2%).
4. Training: same ``--max-tokens`` (padded frames per batch), ``--updates`` updates, Adam(W) lr
   ``--lr`` with inverse-sqrt warm-up, label smoothing 0.1, clip 10, no CTC, the same dropouts
   (``--dropout-match``: ``ours``, the default, runs fairseq with our ``s`` model's residual, attention
   and activation dropout, 0.1 / 0 / 0; ``fairseq`` gives our model fairseq's ``s2t_transformer_s``
   values, 0.1 / 0.1 / 0.1; ``none`` leaves each toolkit its own, as runs before this option did; the
   values each side used are recorded under ``dropouts``), ``--threads`` CPU threads, one process each, in alternating order for ``--pairs``
   pairs. Throughput = valid fbank frames / wall seconds over updates 2..U (update 1 excluded: lazy
   init); fairseq's wall times come from its per-update JSON log (``--log-interval 1``), ours from
   the same loop boundaries; process CPU seconds are recorded alike (``*_per_cpu_s``), which are far
   less sensitive to other jobs on a shared machine.
5. Dev loss (label-smoothed CE per target token, nats; fairseq logs base 2 and is converted) after
   the U updates of each run, and "at equal training time": after the last pair ours is trained
   for as many process CPU seconds as fairseq's last run used (equal to wall time with one thread
   on an idle machine) and its dev loss reported.
6. MFU and thread scaling in the same run: ``bench/bench_train.py`` times the ``s`` model of its own
   benchmark (unified, 4 languages, CTC, wait-3 mask, fp32) at ``--mfu-threads`` (default 1 and 2)
   threads; its rows are stored under ``train_s``.

``summary`` (:func:`summarize`): ``ratio_fp32_median`` (ours fp32 / fairseq, median over pairs),
``ratio_compiled_median`` (our training's default ``compile`` setting: equal to the fp32 ratio while
that default is ``false``, eager), ``ratio_bf16_median``, ``mfu_s_1t``, ``mfu_s_2t``,
``speedup_2t_over_1t_s`` (s/update at 1 thread over s/update at 2 threads), the dev loss at equal
updates and at equal training time, the goals and whether they are met.

``--dev-seeds S1 S2 ...``: no timing; both toolkits train ``--updates`` updates (ours in fp32) at each seed and
the dev losses are compared seed by seed (:func:`seed_summary`), to tell a difference per update from the
spread that parameter initialisation, batch order and dropout draws give (``vs_fairseq_seeds.json``). It
measures no time, so it may run beside other jobs.

Results: ``docs/results/vs_fairseq.json`` and a table (ratio ours / fairseq: min, median, max).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from provenance import RESULTS_DIR, run_record, write_results

from mmst.cli_help import ArgumentParser

#: The paths this benchmark runs without importing them; the repository modules that it and its child processes
#: import are recorded at run time (``provenance.depends_on``, bench/provenance.py).
DEPENDS_ON = ("bench/bench_vs_fairseq.py", "bench/bench_train.py")

#: Goals of the summary: throughput ratio ours / fairseq (fp32 or compiled), MFU of ``s`` at 2 threads.
GOALS = {"ratio": 1.5, "mfu_s_2t": 0.5}

REPO = Path(__file__).resolve().parents[1]


def fairseq_available() -> bool:
    """True when ``fairseq`` imports (the optional extra is installed)."""
    r = subprocess.run([sys.executable, "-c", "import fairseq, fairseq_cli.train"], capture_output=True,
                       text=True, env=dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1"))
    return r.returncode == 0


def make_data(work: Path, n_train: int) -> Path:
    """A synthetic DATA dir (feature-space corpus of the test fixtures) under ``work/data``."""
    from mmst.corpora.feature_corpus import build_feature_corpus

    d = work / "data"
    if not (d / "config.yaml").exists():
        build_feature_corpus(d, langs=("de", "es", "fr"), n_train=n_train, n_dev=max(16, n_train // 10),
                             frames_per_word=25)
    return d


def write_fairseq_inputs(data: Path, out: Path, lang: str) -> dict[str, Any]:
    """fairseq speech_to_text inputs from our DATA dir (see module docstring); returns a summary."""
    import numpy as np
    import sentencepiece as spm
    import yaml

    from mmst.data.corpus import load_data_config
    from mmst.data.manifest import read_manifest
    from mmst.data.store import read_feature

    cfg = load_data_config(data)
    out.mkdir(parents=True, exist_ok=True)
    (out / "npy").mkdir(exist_ok=True)
    joint = data / cfg["vocab"]["joint"]
    sp = spm.SentencePieceProcessor(model_file=str(joint))
    with open(out / "spm_joint.txt", "w", encoding="utf-8") as fh:
        for i in range(4, sp.get_piece_size()):
            fh.write(f"{sp.id_to_piece(i)} 1\n")
    counts = {}
    for split in ("train", "dev"):
        rows = read_manifest(data / f"{split}.tsv")
        lines = ["id\taudio\tn_frames\ttgt_text\tspeaker"]
        for r in rows:
            text = r.get(f"tgt_text_{lang}", "").strip()
            if not text:
                continue
            p = out / "npy" / f"{r['id']}.npy"
            if not p.exists():
                np.save(p, read_feature(data, r["audio"]))
            lines.append(f"{r['id']}\t{p}\t{r['n_frames']}\t{text}\t{r.get('speaker', 'spk')}")
        (out / f"{split}_st.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        counts[split] = len(lines) - 1
    fcfg = {"input_feat_per_channel": 80, "vocab_filename": "spm_joint.txt",
            "bpe_tokenizer": {"bpe": "sentencepiece", "sentencepiece_model": str(joint.resolve())},
            "global_cmvn": {"stats_npz_path": str((data / cfg["gcmvn"]).resolve())},
            "transforms": {"*": ["global_cmvn"]}}
    with open(out / "config.yaml", "w", encoding="utf-8") as fh:
        yaml.safe_dump(fcfg, fh)
    return {"vocab": sp.get_piece_size(), "utterances": counts}


#: The dropouts of each side's model (``dropout``, ``attention_dropout``, ``activation_dropout``).
DROPOUT_KEYS = ("dropout", "attention_dropout", "activation_dropout")


def dropout_overrides(match: str, lang: str) -> tuple[dict[str, float], dict[str, float]]:
    """``(ours, fairseq)`` dropout overrides for ``--dropout-match`` ``match``: ``ours`` sets fairseq's to our
    ``s`` model's defaults, ``fairseq`` sets ours to ``s2t_transformer_s``'s (0.1 each, fairseq's
    ``base_architecture``: attention and activation dropout default to ``dropout``), ``none`` sets nothing."""
    from mmst.models import model_config_for_size

    if match == "none":
        return {}, {}
    if match == "fairseq":
        return dict.fromkeys(DROPOUT_KEYS, 0.1), {}
    cfg = model_config_for_size("s", arch="separate", tgt_langs=[lang], vocab_size=8, encoder_attention="offline")
    return {}, {k: float(getattr(cfg, k)) for k in DROPOUT_KEYS}


def run_fairseq(fs_dir: Path, save: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Train fairseq s2t_transformer_s for ``args.updates`` updates in a subprocess
    (:func:`worker_fairseq` runs ``fairseq_cli.train`` with timing hooks); returns its JSON result."""
    save.mkdir(parents=True, exist_ok=True)
    fs_args = [str(fs_dir), "--task", "speech_to_text",
               "--config-yaml", "config.yaml", "--train-subset", "train_st", "--valid-subset", "dev_st",
               "--arch", "s2t_transformer_s", "--share-decoder-input-output-embed",
               "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
               "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", str(args.lr),
               "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(args.warmup_updates), "--clip-norm", "10.0",
               "--max-tokens", str(args.max_tokens), "--max-update", str(args.updates),
               "--required-batch-size-multiple", "1", "--num-workers", "0", "--cpu", "--seed", str(args.seed),
               "--log-format", "json", "--log-interval", "1", "--save-dir", str(save), "--no-save",
               "--max-tokens-valid", str(args.max_tokens)]
    for k, v in dropout_overrides(args.dropout_match, args.lang)[1].items():
        fs_args += [f"--{k.replace('_', '-')}", str(v)]
    out_json = save / "timing.json"
    cmd = [sys.executable, __file__, "--worker-fairseq", str(out_json), "--threads", str(args.threads), "--", *fs_args]
    env = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1", OMP_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads))
    if args.omp_wait_policy:
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    log = r.stdout + r.stderr
    if r.returncode or not out_json.exists():
        raise RuntimeError(f"fairseq-train failed:\n{log[-3000:]}")
    res = json.loads(out_json.read_text())
    nparams = re.search(r"num\. (?:shared )?model params: ([\d,]+)", log)
    res["params"] = int(nparams.group(1).replace(",", "")) if nparams else None
    return res


def worker_fairseq(out_json: str, threads: int, fs_args: list[str]) -> None:
    """Run ``fairseq_cli.train`` in this process, recording the wall time after every
    ``Trainer.train_step`` (perf_counter, s since the first update started), the source frames and
    target tokens of each update, and the dev loss of the final validation (converted to nats)."""
    import torch
    from fairseq import trainer as fs_trainer
    from fairseq_cli import train as fs_train

    torch.set_num_threads(threads)
    rec: dict[str, Any] = {"walls": [], "cpus": [], "frames": [], "tokens": [], "dev_loss": None}
    t0: list[float] = []
    c0: list[float] = []
    orig_step = fs_trainer.Trainer.train_step

    def train_step(self, samples, raise_oom=False):
        if not t0:
            rec["dropouts"] = {k: float(getattr(self.cfg.model, k)) for k in DROPOUT_KEYS}
            t0.append(time.perf_counter())
            c0.append(time.process_time())
        for smp in samples:
            if smp:
                rec["frames"].append(int(smp["net_input"]["src_lengths"].sum()))
                rec["tokens"].append(int(smp["ntokens"]))
        out = orig_step(self, samples, raise_oom)
        rec["walls"].append(time.perf_counter() - t0[0])
        rec["cpus"].append(time.process_time() - c0[0])
        return out

    fs_trainer.Trainer.train_step = train_step
    orig_validate = fs_train.validate

    def validate(*a, **kw):
        losses = orig_validate(*a, **kw)
        if losses and losses[0] is not None:
            rec["dev_loss"] = float(losses[0]) * math.log(2)  # fairseq logs base 2
        return losses

    fs_train.validate = validate
    sys.argv = ["fairseq-train", *fs_args]
    fs_train.cli_main()
    Path(out_json).write_text(json.dumps(rec))


def run_ours(data: Path, args: argparse.Namespace, precision: str = "fp32", max_seconds: float | None = None,
             max_cpu_seconds: float | None = None) -> dict[str, Any]:
    """Train our ``s`` model (one language, offline) at ``precision`` in a subprocess; returns its JSON result."""
    cmd = [sys.executable, __file__, "--worker-ours", str(data), "--tgt-langs", args.lang, "--max-tokens",
           str(args.max_tokens), "--updates", str(args.updates), "--lr", str(args.lr), "--warmup-updates",
           str(args.warmup_updates), "--threads", str(args.threads), "--precision", precision,
           "--optimizer", args.optimizer, "--seed", str(args.seed), "--dropout-match", args.dropout_match]
    if max_seconds is not None:
        cmd += ["--max-seconds", str(max_seconds)]
    if max_cpu_seconds is not None:
        cmd += ["--max-cpu-seconds", str(max_cpu_seconds)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    if args.omp_wait_policy:
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if r.returncode or not line:
        raise RuntimeError(f"our training failed:\n{r.stderr[-3000:]}")
    return json.loads(line[-1][7:])


def worker_ours(args: argparse.Namespace) -> dict[str, Any]:
    """Our training loop (same pieces as mmst-train: MultiwayDataset, length-bucketed batches by padded
    frames, SingleProcessStrategy update, AdamW + inverse-sqrt); dev loss per token at the end."""
    import torch

    from mmst.data.batching import make_batches
    from mmst.data.dataset import MultiwayDataset
    from mmst.losses import MultilingualCriterion
    from mmst.models import build_model, model_config_for_size
    from mmst.training.optim import InverseSqrtSchedule, build_optimizer
    from mmst.training.step import compute_loss
    from mmst.training.strategy import SingleProcessStrategy

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = Path(args.worker_ours)
    t_start = time.perf_counter()
    tr = MultiwayDataset(data, "train", tgt_langs=[args.lang], with_src=False, cache_features=True)
    dv = MultiwayDataset(data, "dev", tgt_langs=[args.lang], with_src=False)
    cfg = model_config_for_size("s", arch="separate", tgt_langs=[args.lang], vocab_size=len(tr.joint_vocab),
                                encoder_attention="offline", **dropout_overrides(args.dropout_match, args.lang)[0])
    model = build_model(cfg)
    crit = MultilingualCriterion(label_smoothing=0.1)
    opt = build_optimizer(model.parameters(), args.lr, [0.9, 0.98], implementation=args.optimizer)
    sched = InverseSqrtSchedule(opt, args.lr, args.warmup_updates)
    precision = args.precision[0]
    strat = SingleProcessStrategy(precision)
    walls, cpus, frames, tokens = [], [], [], []
    epoch, n_up = 1, 0
    t0, c0 = time.perf_counter(), time.process_time()
    budget = args.max_seconds or args.max_cpu_seconds

    def over() -> bool:
        if args.max_seconds:
            return walls[-1] >= args.max_seconds
        return cpus[-1] >= args.max_cpu_seconds

    while n_up < args.updates or budget:
        for bi in make_batches(tr.n_frames, args.max_tokens, seed=args.seed, epoch=epoch):
            b = tr.collater([tr[i] for i in bi])
            strat.run_update(model, crit, opt, sched, [b], [None], 10.0)
            n_up += 1
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            frames.append(b.n_frames)
            tokens.append(b.total_ntokens)
            if budget and over():
                break
            if not budget and n_up >= args.updates:
                break
        if budget and walls and over():
            break
        epoch += 1
    model.eval()
    tot, ntok = 0.0, 0
    with torch.no_grad():
        for bi in make_batches(dv.n_frames, args.max_tokens, shuffle=False):
            loss, st = compute_loss(model, dv.collater([dv[i] for i in bi]), crit, None, precision="fp32")
            tot += float(loss)
            ntok += int(st["ntokens"])
    return {"walls": walls, "cpus": cpus, "frames": frames, "tokens": tokens, "updates": n_up, "dev_loss": tot / max(ntok, 1),
            "dropouts": {k: float(getattr(cfg, k)) for k in DROPOUT_KEYS},
            "params": model.num_parameters(), "wall_total_s": time.perf_counter() - t_start}


def throughput(walls: list[float], frames: list[float]) -> float | None:
    """Frames per second over updates 2..U (update 1 excluded)."""
    if len(walls) < 3:
        return None
    return sum(frames[1:]) / (walls[-1] - walls[0])


def run_train_rows(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """The ``s`` rows of ``bench/bench_train.py`` (unified, 4 languages, fp32, synthetic batches of
    ``--mfu-frames`` frames) at each of ``--mfu-threads``, run as a subprocess; returns its result rows
    (``[]`` when no thread count is given). Raises ``RuntimeError`` when it fails."""
    if not args.mfu_threads:
        return []
    out = work / "train_s.json"
    cmd = [sys.executable, str(REPO / "bench" / "bench_train.py"), "--sizes", "s", "--threads",
           *map(str, args.mfu_threads), "--precision", "fp32", "--frames", str(args.mfu_frames), "--updates",
           str(args.mfu_updates), "--warmup", "1", "--specaugment", "none", "--omp-wait-policy",
           args.omp_wait_policy, "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode or not out.exists():
        raise RuntimeError(f"bench_train.py failed:\n{(r.stdout + r.stderr)[-3000:]}")
    return json.loads(out.read_text())["results"]


def summarize(by_prec: dict[str, Any], pairs_dev: dict[str, list[float]], train_rows: list[dict[str, Any]],
              updates: int, compile_default: Any) -> dict[str, Any]:
    """The run's ``summary``.

    ``by_prec``: per precision ``ratio_median`` and ``equal_wall`` (see :func:`main`); ``pairs_dev``: the dev
    losses after ``updates`` updates of every pair, per run (``"fairseq"``, ``"ours_fp32"``, ...);
    ``train_rows``: bench_train rows of the ``s`` model (``threads``, ``s_per_update``, ``mfu``);
    ``compile_default``: our training config's default ``compile`` value. ``ratio_compiled_median`` is the
    fp32 ratio when that default is off (what a user runs is eager), else ``None`` (not measured here).
    ``speedup_2t_over_1t_s`` = s/update at 1 thread / s/update at 2 threads. Dev losses are medians over
    the pairs (each pair trains the same batches from the same seed). ``met``: ``max(ratio_fp32_median,
    ratio_compiled_median) >= 1.5`` and ``mfu_s_2t >= 0.5`` (``None`` when not measured).
    """
    import statistics

    def med(xs: list[float] | None) -> float | None:
        xs = [x for x in xs or [] if x is not None]
        return statistics.median(xs) if xs else None

    r32 = (by_prec.get("fp32") or {}).get("ratio_median")
    compiled = r32 if compile_default in (False, "false", None) else None
    rows = {r["threads"]: r for r in train_rows}
    m1, m2 = (rows.get(t, {}).get("mfu") for t in (1, 2))
    sp = (rows[1]["s_per_update"] / rows[2]["s_per_update"]) if 1 in rows and 2 in rows else None
    eq = (by_prec.get("fp32") or {}).get("equal_wall") or {}
    ratios = [r for r in (r32, compiled) if r is not None]
    return {
        "ratio_fp32_median": r32, "ratio_compiled_median": compiled,
        "ratio_bf16_median": (by_prec.get("bf16") or {}).get("ratio_median"),
        "compile_default": compile_default, "compiled_measured": False,
        "mfu_s_1t": m1, "mfu_s_2t": m2, "speedup_2t_over_1t_s": sp,
        "dev_loss_equal_updates": {"updates": updates, **{k: med(v) for k, v in pairs_dev.items()}},
        "dev_loss_equal_time": {"cpu_seconds": eq.get("cpu_seconds"), "ours_fp32": eq.get("ours_dev_loss"),
                                "ours_fp32_updates": eq.get("ours_updates"), "fairseq": eq.get("fairseq_dev_loss"),
                                "fairseq_updates": eq.get("fairseq_updates")},
        "goals": {"ratio": f">= {GOALS['ratio']}", "mfu_s_2t": f">= {GOALS['mfu_s_2t']}"},
        "met": {"ratio": max(ratios) >= GOALS["ratio"] if ratios else None,
                "mfu_s_2t": m2 >= GOALS["mfu_s_2t"] if m2 is not None else None},
    }


def seed_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Dev losses of both toolkits over seeds (``rows``: ``{"seed", "ours_fp32", "fairseq"}``): per-toolkit mean,
    min and max, the mean and range of ``ours - fairseq`` per seed, and ``spread_over_seeds``, the largest
    range of one toolkit over the seeds (the scale against which a difference per update is read)."""
    import statistics

    out: dict[str, Any] = {}
    for who in ("ours_fp32", "fairseq"):
        xs = [r[who] for r in rows]
        out[who] = {"mean": statistics.fmean(xs), "min": min(xs), "max": max(xs)}
    diff = [r["ours_fp32"] - r["fairseq"] for r in rows]
    out["ours_minus_fairseq"] = {"mean": statistics.fmean(diff), "min": min(diff), "max": max(diff)}
    out["spread_over_seeds"] = max(out[w]["max"] - out[w]["min"] for w in ("ours_fp32", "fairseq"))
    return out


def run_dev_seeds(args: argparse.Namespace, data: Path, fs_dir: Path, work: Path) -> dict[str, Any]:
    """``--dev-seeds``: both toolkits trained ``--updates`` updates at each seed (ours fp32); dev losses only."""
    rows = []
    for seed in args.dev_seeds:
        a = argparse.Namespace(**{**vars(args), "seed": seed})
        o = run_ours(data, a, "fp32")
        f = run_fairseq(fs_dir, work / f"seed{seed}", a)
        rows.append({"seed": seed, "ours_fp32": o["dev_loss"], "fairseq": f["dev_loss"],
                     "dropouts": {"ours": o["dropouts"], "fairseq": f.get("dropouts")}})
        print(f"seed {seed}: dev loss after {args.updates} updates ours {o['dev_loss']:.3f}, fairseq "
              f"{f['dev_loss']:.3f}", flush=True)
    return {"rows": rows, "summary": seed_summary(rows)}


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = ArgumentParser(description=__doc__)
    p.add_argument("--data", default=None, help="our DATA dir (default: a synthetic corpus under --work)")
    p.add_argument("--work", default="/tmp/mmst_vs_fairseq", help="scratch directory")
    p.add_argument("--tgt-langs", dest="lang", default="de", help="target language, one (fairseq s2t is bilingual)")
    p.add_deprecated_alias("--lang", "--tgt-langs")
    p.add_argument("--n-train", type=int, default=600, help="utterances of the synthetic corpus")
    p.add_argument("--max-tokens", type=int, default=4000, help="padded fbank frames per batch (both)")
    p.add_argument("--updates", type=int, default=30, help="updates per run")
    p.add_argument("--pairs", type=int, default=3, help="rounds of (ours at each --precision, fairseq), order alternating between rounds")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of both trainings (parameter init, batch order, dropout); each toolkit draws its own "
                        "random numbers from it")
    p.add_argument("--warmup-updates", type=int, default=10, help="LR warm-up updates")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of each run (1: see bench/NOTES.md on 2-thread oversubscription)")
    p.add_argument("--omp-wait-policy", default="PASSIVE",
                   help="OMP_WAIT_POLICY of both training processes ('' = inherit; see bench/NOTES.md)")
    p.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"],
                   help="our forward precision(s) (mmst-train --precision); each is one run per pair. fp32 is the "
                        "like-for-like comparison; bf16 is our CPU mixed precision (bf16 autocast, fp32 weights "
                        "and loss), which fairseq does not have on CPU (its --bf16 implies --tpu, --amp is CUDA only)")
    p.add_argument("--dropout-match", default="ours", choices=["ours", "fairseq", "none"],
                   help="same dropouts on both sides: ours (fairseq gets our s model's residual/attention/activation "
                        "dropout), fairseq (ours gets s2t_transformer_s's 0.1 each) or none (each toolkit its own)")
    p.add_argument("--optimizer", default="fused", choices=["fused", "foreach", "for-loop"],
                   help="our AdamW implementation (mmst-train optim.implementation)")
    p.add_argument("--mfu-threads", nargs="*", type=int, default=[1, 2],
                   help="thread counts at which bench/bench_train.py times the s model (fp32) in the same run, for "
                        "the summary's MFU and 2-thread speed-up (none given: skipped)")
    p.add_argument("--mfu-frames", type=int, default=8000, help="padded frames per batch of those rows")
    p.add_argument("--mfu-updates", type=int, default=3, help="timed updates of those rows")
    p.add_argument("--dev-seeds", nargs="+", type=int, default=None,
                   help="no timing: train both toolkits --updates updates at each of these seeds and compare the dev "
                        "losses (default output docs/results/vs_fairseq_seeds.json)")
    p.add_argument("--quick", action="store_true", help="smoke test: 6 updates x 1 pair, small batches")
    p.add_argument("--out", default=None,
                   help="JSON output (default docs/results/vs_fairseq.json; with --dev-seeds vs_fairseq_seeds.json)")
    p.add_argument("--worker-ours", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-fairseq", default=None, help=argparse.SUPPRESS)
    p.add_argument("fairseq_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.add_argument("--max-seconds", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--max-cpu-seconds", type=float, default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    args = build_parser().parse_args(argv)
    if args.worker_ours:
        print("RESULT " + json.dumps(worker_ours(args)))
        return 0
    if args.worker_fairseq:
        fa = args.fairseq_args[1:] if args.fairseq_args[:1] == ["--"] else args.fairseq_args
        worker_fairseq(args.worker_fairseq, args.threads, fa)
        return 0
    if args.quick:
        args.updates, args.pairs, args.max_tokens, args.n_train = 6, 1, 1500, 120
        args.mfu_frames, args.mfu_updates = 2000, 1
    record = run_record(depends_on=DEPENDS_ON)  # at the start: the code that runs (the workers add their imports)
    out = Path(args.out or RESULTS_DIR / ("vs_fairseq_seeds.json" if args.dev_seeds else "vs_fairseq.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    if not fairseq_available():
        msg = ("bench_vs_fairseq: skipped: fairseq is not importable (install the optional extra: "
               "pip install -e .[fairseq], see bench/NOTES.md)")
        print(msg)
        if out.exists() and "skipped" not in json.loads(out.read_text() or "{}"):
            print(f"bench_vs_fairseq: kept the measured results in {out}")
        else:
            write_results(out, {"provenance": record, "skipped": msg})
        return 0
    work = Path(args.work)
    data = Path(args.data) if args.data else make_data(work, args.n_train)
    fs_dir = work / f"fairseq_{args.lang}"
    info = write_fairseq_inputs(data, fs_dir, args.lang)
    if args.dev_seeds:
        t0 = time.perf_counter()
        res = run_dev_seeds(args, data, fs_dir, work)
        sm = res["summary"]
        print(f"ours - fairseq over seeds: mean {sm['ours_minus_fairseq']['mean']:+.3f} (range "
              f"{sm['ours_minus_fairseq']['min']:+.3f}..{sm['ours_minus_fairseq']['max']:+.3f}); spread of one toolkit "
              f"over the seeds {sm['spread_over_seeds']:.3f}")
        cfg = {k: getattr(args, k) for k in ("lang", "max_tokens", "updates", "lr", "warmup_updates", "dropout_match",
                                             "dev_seeds")}
        write_results(out, {"provenance": record,
                            "config": cfg | {"data": str(data), **info}, **res, "runtime_s": time.perf_counter() - t0})
        return 0
    pairs = []
    t_start = time.perf_counter()
    from mmst.training.step import bf16_warning

    precs = list(dict.fromkeys(args.precision))
    for prec_name in list(precs):
        slow_bf16 = bf16_warning("cpu", prec_name)
        if slow_bf16 and len(precs) > 1:
            print(f"ours {prec_name}: skipped: {slow_bf16}", flush=True)
            precs.remove(prec_name)
    runs = [f"ours_{p}" for p in precs] + ["fairseq"]
    for i in range(args.pairs):
        order = runs if i % 2 == 0 else runs[::-1]
        pr: dict[str, Any] = {"order": list(order)}
        for who in order:
            if who == "fairseq":
                pr["fairseq"] = run_fairseq(fs_dir, work / f"ckpt{i}", args)
            else:
                pr[who] = run_ours(data, args, who[5:])
        f = pr["fairseq"]
        pr["fairseq_frames_per_s"] = throughput(f["walls"], f["frames"])
        pr["fairseq_tokens_per_s"] = throughput(f["walls"], f["tokens"])
        pr["fairseq_frames_per_cpu_s"] = throughput(f["cpus"], f["frames"])
        msg = []
        for p in precs:
            o = pr[f"ours_{p}"]
            fps, cps = throughput(o["walls"], o["frames"]), throughput(o["cpus"], o["frames"])
            pr[f"ours_{p}_frames_per_s"] = fps
            pr[f"ours_{p}_tokens_per_s"] = throughput(o["walls"], o["tokens"])
            pr[f"ours_{p}_frames_per_cpu_s"] = cps
            # per CPU second of the process: less sensitive to other jobs on a shared machine
            pr[f"ratio_{p}_frames_per_s"] = fps / pr["fairseq_frames_per_s"] if fps and pr["fairseq_frames_per_s"] else None
            pr[f"ratio_{p}_frames_per_cpu_s"] = (cps / pr["fairseq_frames_per_cpu_s"]
                                                 if cps and pr["fairseq_frames_per_cpu_s"] else None)
            msg.append(f"ours {p} {fps:.0f} frames/s (ratio {pr[f'ratio_{p}_frames_per_s']:.2f}, dev loss "
                       f"{o['dev_loss']:.3f})")
        pairs.append(pr)
        print(f"pair {i + 1} ({'/'.join(order)}): fairseq {pr['fairseq_frames_per_s']:.0f} frames/s (dev loss "
              f"{f['dev_loss']:.3f}); " + "; ".join(msg), flush=True)
    # equal time: ours trained for fairseq's training time of the last pair, measured as process CPU
    # seconds (robust to load changes on a shared machine; = wall time on an idle one with 1 thread)
    f_last = pairs[-1]["fairseq"]
    by_prec: dict[str, Any] = {}
    for p in precs:
        ratios = [pr[f"ratio_{p}_frames_per_s"] for pr in pairs if pr[f"ratio_{p}_frames_per_s"]]
        cratios = [pr[f"ratio_{p}_frames_per_cpu_s"] for pr in pairs if pr[f"ratio_{p}_frames_per_cpu_s"]]
        eq = run_ours(data, args, p, max_cpu_seconds=f_last["cpus"][-1]) if f_last["walls"] else None
        by_prec[p] = {
            "ratio_min": min(ratios) if ratios else None,
            "ratio_median": statistics.median(ratios) if ratios else None,
            "ratio_max": max(ratios) if ratios else None,
            "cpu_ratio_min": min(cratios) if cratios else None,
            "cpu_ratio_median": statistics.median(cratios) if cratios else None,
            "cpu_ratio_max": max(cratios) if cratios else None,
            "dev_loss_after_updates": [pr[f"ours_{p}"]["dev_loss"] for pr in pairs],
            "equal_wall": None if eq is None else {
                "seconds": f_last["walls"][-1], "cpu_seconds": f_last["cpus"][-1], "ours_cpu_seconds": eq["cpus"][-1],
                "ours_wall_seconds": eq["walls"][-1], "fairseq_dev_loss": f_last["dev_loss"],
                "ours_dev_loss": eq["dev_loss"], "ours_updates": eq["updates"], "fairseq_updates": len(f_last["walls"])},
        }
    train_rows = run_train_rows(args, work)
    from mmst.training.config import TrainConfig

    pairs_dev = {"fairseq": [pr["fairseq"]["dev_loss"] for pr in pairs],
                 **{f"ours_{p}": [pr[f"ours_{p}"]["dev_loss"] for pr in pairs] for p in precs}}
    summary = summarize(by_prec, pairs_dev, train_rows, args.updates, TrainConfig().compile)
    head = by_prec.get("fp32") or by_prec[precs[0]]
    res = {
        "config": {k: getattr(args, k) for k in ("lang", "max_tokens", "updates", "pairs", "lr", "seed", "dropout_match", "threads",
                                                  "warmup_updates", "omp_wait_policy", "precision", "optimizer")}
        | {"data": str(data), **info, "loadavg_1min": os.getloadavg()[0]},
        "params": {"ours": pairs[0][f"ours_{precs[0]}"]["params"], "fairseq": pairs[0]["fairseq"]["params"]},
        "dropouts": {"ours": pairs[0][f"ours_{precs[0]}"]["dropouts"], "fairseq": pairs[0]["fairseq"].get("dropouts")},
        "pairs": [{k: v for k, v in pr.items() if k != "fairseq" and not k.startswith("ours_") or "_per_" in k} | {
            **{f"ours_{p}_dev_loss": pr[f"ours_{p}"]["dev_loss"] for p in precs},
            **{f"ours_{p}_train_wall_s": pr[f"ours_{p}"]["walls"][-1] for p in precs},
            "fairseq_dev_loss": pr["fairseq"]["dev_loss"],
            "fairseq_train_wall_s": (pr["fairseq"]["walls"] or [None])[-1],
        } for pr in pairs],
        "fairseq_dev_loss_after_updates": [pr["fairseq"]["dev_loss"] for pr in pairs],
        "by_precision": by_prec, "goal_ratio": ">= 1.5",
        # headline (fp32 when measured: the like-for-like comparison)
        "headline_precision": "fp32" if "fp32" in by_prec else precs[0],
        **{k: head[k] for k in ("ratio_min", "ratio_median", "ratio_max", "cpu_ratio_min", "cpu_ratio_median",
                                "cpu_ratio_max", "equal_wall")},
        "train_s": [{k: r.get(k) for k in ("size", "arch", "threads", "precision", "langs", "batch_frames",
                                            "s_per_update", "frames_per_s", "model_gflop_per_update",
                                            "achieved_gflops", "peak_gflops", "mfu")} for r in train_rows],
        "summary": summary,
        "runtime_s": time.perf_counter() - t_start,
    }
    dr = res["dropouts"]
    if args.dropout_match != "none" and dr["fairseq"] is not None and dr["ours"] != dr["fairseq"]:
        print(f"warning: the two models trained with different dropouts: {dr}", file=sys.stderr)
    pa = res["params"]
    if pa["ours"] and pa["fairseq"]:
        res["params"]["rel_diff"] = pa["ours"] / pa["fairseq"] - 1
    print(f"bench_vs_fairseq: s model, lang {args.lang}, max_tokens {args.max_tokens}, {args.updates} updates, "
          f"{args.threads} threads, {args.pairs} pairs, optimizer {args.optimizer}")
    print(f"params ours / fairseq: {pa['ours']} / {pa['fairseq']}")
    print("| ours precision | throughput ratio ours/fairseq (valid frames/s) min / median / max | per CPU second "
          "min / median / max | dev loss at equal training time ours / fairseq |")
    print("|---|---|---|---|")
    for p, b in by_prec.items():
        e = b["equal_wall"] or {}

        def f3(*xs):
            return " / ".join("-" if x is None else f"{x:.2f}" for x in xs)
        print(f"| {p} | {f3(b['ratio_min'], b['ratio_median'], b['ratio_max'])} (goal >= 1.5) | "
              f"{f3(b['cpu_ratio_min'], b['cpu_ratio_median'], b['cpu_ratio_max'])} | "
              + (f"{e['ours_dev_loss']:.3f} ({e['ours_updates']} upd) / {e['fairseq_dev_loss']:.3f} "
                 f"({e['fairseq_updates']} upd, {e['cpu_seconds']:.0f} CPU s) |" if e else "- |"))
    sm = summary

    def fmt(x, f="{:.2f}"):
        return "-" if x is None else f.format(x)
    print(f"summary: ratio fp32 median {fmt(sm['ratio_fp32_median'])}, compiled {fmt(sm['ratio_compiled_median'])} "
          f"(goal {sm['goals']['ratio']}: {sm['met']['ratio']}); MFU s 1t {fmt(sm['mfu_s_1t'], '{:.1%}')}, "
          f"2t {fmt(sm['mfu_s_2t'], '{:.1%}')} (goal {sm['goals']['mfu_s_2t']}: {sm['met']['mfu_s_2t']}); "
          f"s 2t/1t speed-up {fmt(sm['speedup_2t_over_1t_s'])}")
    write_results(out, {"provenance": record, **res})
    return 0


if __name__ == "__main__":
    sys.exit(main())
