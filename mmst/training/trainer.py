"""Single-process training loop, composed of small parts (a recipe, not a mega-trainer).

:func:`build_trainer` reads a DATA directory and a :class:`~mmst.training.config.TrainConfig` and wires:

1. datasets (:class:`mmst.data.dataset.MultiwayDataset`) and a resumable
   :class:`mmst.data.batching.EpochBatchIterator` (``max_tokens`` frames, length bucketing);
2. the model (``mmst.models.build_model``) and ``mmst.losses.MultilingualCriterion``;
3. AdamW + inverse-sqrt (:mod:`mmst.training.optim`);
4. an update strategy (:mod:`mmst.training.strategy`; default: single-process gradient accumulation);
5. a :class:`Validator` (per-language loss + greedy wait-k BLEU), a :class:`CheckpointManager`
   and a :class:`TrainLogger` (JSONL + TensorBoard + tqdm).

:class:`Trainer` owns the loop: per update draw ``update_freq`` micro-batches and one wait-k per
micro-batch (multi-k), run the strategy, handle NaN skips, log, validate, checkpoint. Every part can be
built separately and injected (tests use a stub model).

Exact resume: checkpoints hold model, optimiser, LR schedule, RNG states (python/numpy/torch), the data
iterator position, the train state and the config; wait-k draws depend only on ``(seed, update,
micro-batch index)``. On CPU a resumed run reproduces an uninterrupted one bit for bit.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mmst.data.batching import Batch, EpochBatchIterator, make_batches
from mmst.evaluation.quality import bleu_tokenizer_for
from mmst.training.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointManager,
    check_vocab_compat,
    get_rng_state,
    load_checkpoint,
    remove_stale_temp_files,
    set_rng_state,
)
from mmst.training.compile import TrainingCompiler, pad_batch_to_buckets
from mmst.training.config import ConfigError, TrainConfig, config_to_dict, normalize_waitk_list
from mmst.training.optim import (
    InverseSqrtSchedule,
    build_optimizer,
    layerwise_param_groups,
    set_optimizer_implementation,
)
from mmst.training.step import bf16_warning
from mmst.training.strategy import SingleProcessStrategy, UpdateResult

logger = logging.getLogger("mmst.train")


class TrainingDivergedError(RuntimeError):
    """Too many consecutive updates had a non-finite loss or gradient (message names the batch ids)."""


# ------------------------------------------------------------------------------------------ helpers


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> cuda if available else cpu; ``"cuda"`` without CUDA raises RuntimeError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda requested but CUDA is not available")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed python ``random``, numpy's global RNG and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


class WaitkSampler:
    """Draws the training wait-k per micro-batch from ``cfg.waitk_lagging`` (multi-k training,
    Elbayad et al. 2020). Deterministic in ``(seed, update, index)`` so resume needs no state."""

    def __init__(self, spec: Any, seed: int) -> None:
        self.choices = normalize_waitk_list(spec)
        self.seed = int(seed)

    def sample(self, update: int, index: int) -> int | None:
        """wait-k (int >= 1, or None = offline) of micro-batch ``index`` of update ``update`` (0-based)."""
        if len(self.choices) == 1:
            return self.choices[0]
        rng = np.random.default_rng([self.seed, 7919, int(update), int(index)])
        return self.choices[int(rng.integers(len(self.choices)))]


# ------------------------------------------------------------------------------------------ logging


class TrainLogger:
    """JSONL log (``SAVE_DIR/train_log.jsonl``), TensorBoard (``SAVE_DIR/tensorboard``) and console.

    Each JSONL line is ``{"kind": "train"|"valid"|"nan"|"event", "update": int, "time": float, ...}``.
    """

    def __init__(self, save_dir: Path, tensorboard: bool = True, enabled: bool = True) -> None:
        self.enabled = enabled
        self.path = save_dir / "train_log.jsonl"
        self.tb_dir = save_dir / "tensorboard"
        self.tb = None
        self._want_tb = bool(enabled and tensorboard)
        self._purge_step: int | None = None

    def _writer(self) -> Any:
        """The TensorBoard writer, opened on first use (after :meth:`resume_at`, with its purge step)."""
        if self.tb is None and self._want_tb:
            self._want_tb = False
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(log_dir=str(self.tb_dir), purge_step=self._purge_step)
            except Exception as e:  # pragma: no cover - tensorboard missing
                logger.warning("TensorBoard disabled: %s", e)
        return self.tb

    def resume_at(self, update: int) -> int:
        """Forget what a killed run logged after the checkpoint it resumes from.

        Records of ``train_log.jsonl`` with ``update > update`` (written between the last checkpoint
        and the crash, and about to be written again) are removed (atomic rewrite), and TensorBoard
        is opened with ``purge_step=update + 1``, so its readers drop that run's later points.

        Returns:
            The number of JSONL records removed.
        """
        self._purge_step = int(update) + 1
        if not self.enabled or not self.path.is_file():
            return 0
        from mmst.atomic import atomic_write_text

        kept, dropped = [], 0
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                u = int(json.loads(line).get("update", 0))
            except (ValueError, AttributeError):  # a line cut by the crash
                dropped += 1
                continue
            if u > update:
                dropped += 1
            else:
                kept.append(line + "\n")
        if dropped:
            atomic_write_text(self.path, "".join(kept))
        return dropped

    def log(self, kind: str, update: int, values: dict[str, Any]) -> None:
        """Append one record; numeric values also go to TensorBoard as ``<kind>/<key>``."""
        if not self.enabled:
            return
        rec = {"kind": kind, "update": int(update), "time": round(time.time(), 3), **values}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
        if self._writer() is not None:
            for k, v in values.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
                    self.tb.add_scalar(f"{kind}/{k}", float(v), update)

    def close(self) -> None:
        """Flush and close TensorBoard."""
        if self.tb is not None:
            self.tb.flush()
            self.tb.close()


# ---------------------------------------------------------------------------------------- validation


@dataclass
class Validator:
    """Per-language validation loss and greedy wait-k BLEU on the first ``bleu_subset`` utterances.

    Loss: label-smoothed loss (``loss_<lang>``) and NLL (``nll_<lang>``) in nats per target token, offline
    unless ``cfg.valid.waitk`` is set. BLEU: sacrebleu corpus BLEU of masked greedy wait-k outputs
    (detokenised with the target vocab) against the manifest text; decoding length capped at
    ``max_len_a * S + max_len_b`` tokens (S = encoder states, 40 ms each).
    """

    dataset: Any
    criterion: Any
    cfg: TrainConfig
    device: torch.device
    #: what the loss pass does to a batch first (``compile: true``: ``pad_batch_to_buckets``, so validation
    #: meets the training graphs' length buckets); None = nothing
    prepare: Any = None

    def _batches(self, indices: Sequence[int]) -> list[Batch]:
        lengths = self.dataset.n_frames[list(indices)]
        groups = make_batches(lengths, max(self.cfg.data.max_tokens, int(lengths.max())),
                              self.cfg.valid.max_sentences, shuffle=False)
        return [self.dataset.collater([self.dataset[indices[i]] for i in g]) for g in groups]

    @torch.no_grad()
    def run(self, model: torch.nn.Module) -> dict[str, float]:
        """Return ``{"loss": mean over languages, "loss_<lang>", "bleu_<lang>_k<k>", "bleu": mean}``."""
        from mmst.training.step import compute_loss

        was_training = model.training
        model.eval()
        vk = normalize_waitk_list(self.cfg.valid.waitk, "valid.waitk")[0]
        acc: dict[str, float] = {}
        n = len(self.dataset)
        for batch in self._batches(list(range(n))):
            b = self.prepare(batch) if self.prepare is not None else batch
            _, st = compute_loss(model, b.to(self.device), self.criterion, vk, precision=self.cfg.precision)
            for k, v in st.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    acc[k] = acc.get(k, 0.0) + float(v)
        res: dict[str, float] = {}
        langs = list(self.dataset.tgt_langs)
        per = []
        for lang in langs:
            nt = acc.get(f"ntokens_{lang}", 0.0)
            if nt > 0:
                res[f"loss_{lang}"] = acc[f"loss_{lang}"] / nt
                res[f"nll_{lang}"] = acc[f"nll_{lang}"] / nt
                per.append(res[f"loss_{lang}"])
        res["loss"] = float(np.mean(per)) if per else float("nan")
        m = min(self.cfg.valid.bleu_subset, n)
        if m > 0:
            res.update(self.bleu(model, list(range(m))))
        model.train(was_training)
        return res

    def bleu(self, model: Any, indices: list[int]) -> dict[str, float]:
        """Greedy BLEU per language and per ``valid.bleu_waitk`` value on ``indices``.

        Decoding: ``mmst.simultaneous.search.greedy_waitk_decode`` (masked greedy wait-k, all languages
        jointly, encoder once; identical to streaming decoding for a chunk-causal encoder).
        """
        import sacrebleu

        from mmst.simultaneous.search import greedy_waitk_decode
        from mmst.training.step import autocast_context

        langs = list(self.dataset.tgt_langs)
        out: dict[str, float] = {}
        scores = []
        for k in normalize_waitk_list(self.cfg.valid.bleu_waitk, "valid.bleu_waitk"):
            hyps: dict[str, list[str]] = {lang: [] for lang in langs}
            refs: dict[str, list[str]] = {lang: [] for lang in langs}
            for batch in self._batches(indices):
                b = batch.to(self.device)
                with autocast_context(self.device, self.cfg.precision):
                    dec = greedy_waitk_decode(model, b.fbank, b.fbank_lengths, langs, k,
                                              max_len_a=self.cfg.valid.max_len_a, max_len_b=self.cfg.valid.max_len_b)
                for lang in langs:
                    for j, idx in enumerate(batch.indices):
                        ref = self.dataset.reference(idx, lang)
                        if not ref.strip():
                            continue
                        hyps[lang].append(self.dataset.tgt_vocabs[lang].decode(dec[lang][j]))
                        refs[lang].append(ref)
            name = "offline" if k is None else f"k{k}"
            for lang in langs:
                if refs[lang]:
                    s = sacrebleu.corpus_bleu(hyps[lang], [refs[lang]], tokenize=bleu_tokenizer_for(lang)[0]).score
                    out[f"bleu_{lang}_{name}"] = s
                    scores.append(s)
        if scores:
            out["bleu"] = float(np.mean(scores))
        return out


# ------------------------------------------------------------------------------------------- trainer


@dataclass
class TrainState:
    """Counters saved in checkpoints (primitives only)."""

    num_updates: int = 0
    best: float | None = None
    nan_skipped: int = 0
    consecutive_nan: int = 0
    nan_batch_ids: list[list[str]] = field(default_factory=list)
    last_valid: dict[str, float] = field(default_factory=dict)
    train_time_s: float = 0.0  # cumulative wall time of training updates (validation excluded), all runs

    def to_dict(self) -> dict[str, Any]:
        """Primitive dict."""
        return {"num_updates": self.num_updates, "best": self.best, "nan_skipped": self.nan_skipped,
                "consecutive_nan": self.consecutive_nan, "nan_batch_ids": self.nan_batch_ids,
                "last_valid": dict(self.last_valid), "train_time_s": self.train_time_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainState:
        """Inverse of :meth:`to_dict`."""
        return cls(num_updates=int(d["num_updates"]), best=d.get("best"), nan_skipped=int(d.get("nan_skipped", 0)),
                   consecutive_nan=int(d.get("consecutive_nan", 0)),
                   train_time_s=float(d.get("train_time_s", 0.0)),
                   nan_batch_ids=[list(x) for x in d.get("nan_batch_ids", [])],
                   last_valid=dict(d.get("last_valid", {})))


class Trainer:
    """The training loop over injected components (see module docstring).

    Args:
        cfg: the full config.
        model, criterion, optimizer, scheduler: built components (model already on ``device``).
        train_iter: :class:`EpochBatchIterator` yielding CPU :class:`Batch` objects.
        save_dir: checkpoint/log directory.
        device: where batches are moved.
        validator: optional :class:`Validator`.
        strategy: update strategy (default :class:`SingleProcessStrategy`).
        extra_state: primitives stored in checkpoints (``data_dir``, ``vocab``, ``tgt_langs``, ...).
        compiler: :class:`mmst.training.compile.TrainingCompiler` already applied to model and criterion
            (default: eager).
    """

    def __init__(self, cfg: TrainConfig, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer,
                 scheduler: InverseSqrtSchedule, train_iter: EpochBatchIterator, save_dir: str | Path,
                 device: torch.device | str = "cpu", validator: Validator | None = None, strategy: Any = None,
                 extra_state: dict[str, Any] | None = None, compiler: TrainingCompiler | None = None) -> None:
        self.cfg = cfg
        self.compiler = compiler
        self.model = model
        self.criterion = criterion
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.train_iter = train_iter
        self.save_dir = Path(save_dir)
        self.device = torch.device(device)
        self.validator = validator
        self.strategy = strategy or SingleProcessStrategy()
        self.extra_state = dict(extra_state or {})
        self.state = TrainState()
        self._loader_s, self._padded_frames = 0.0, 0  # per log window: batch wait (s), padded frames
        self.waitk = WaitkSampler(cfg.waitk_lagging, cfg.seed)
        self.ckpt = CheckpointManager(self.save_dir, cfg.checkpoint.keep_last)
        main = bool(getattr(self.strategy, "is_main_process", True))
        self.is_main = main
        self.log = TrainLogger(self.save_dir, cfg.logging.tensorboard, enabled=main)
        if main:
            for p in remove_stale_temp_files(self.save_dir):
                logger.warning("removed %s, left by a process killed while saving a checkpoint", p)
        self._last_saved_update = -1
        if hasattr(self.strategy, "setup"):
            self.strategy.setup(self)

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything needed for exact resume (tensors and primitive containers only)."""
        model_cfg = getattr(self.model, "cfg", None)
        return {
            "format": CHECKPOINT_FORMAT, "version": 1,
            "model": self.model.state_dict(),
            "model_cfg": model_cfg.to_dict() if hasattr(model_cfg, "to_dict") else None,
            "model_arch": getattr(model_cfg, "arch", None),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": get_rng_state(),
            "data_iterator": self.train_iter.state_dict(),
            "train_state": self.state.to_dict(),
            "config": config_to_dict(self.cfg),
            **self.extra_state,
        }

    def load_state_dict(self, ckpt: dict[str, Any]) -> None:
        """Restore everything saved by :meth:`state_dict` (vocab/language checks are done by the caller)."""
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        set_optimizer_implementation(self.optimizer, self.cfg.optim.implementation)
        self.scheduler.load_state_dict(ckpt["scheduler"])
        self.train_iter.load_state_dict(ckpt["data_iterator"])
        self.state = TrainState.from_dict(ckpt["train_state"])
        set_rng_state(ckpt["rng"])
        self._last_saved_update = self.state.num_updates

    def save(self, numbered: bool = True, best: bool = False) -> None:
        """Write checkpoint_<update>.pt / checkpoint_last.pt (and checkpoint_best.pt if ``best``)."""
        if not self.is_main:
            return
        u = self.state.num_updates
        paths = self.ckpt.save(self.state_dict(), u, numbered=numbered, last=numbered, best=best)
        if numbered:
            self._last_saved_update = u
        self.log.log("event", u, {"saved": [p.name for p in paths]})

    def save_best_only(self) -> None:
        """Write only checkpoint_best.pt for the current state."""
        if self.is_main:
            self.ckpt.save(self.state_dict(), self.state.num_updates, numbered=False, last=False, best=True)

    # ----------------------------------------------------------------- validation
    def validate(self) -> bool:
        """Run the validator; log; update ``state.best``. Returns True when the result is a new best."""
        if self.validator is None or not self.is_main:
            return False
        t0 = time.time()
        res = self.validator.run(self.model)
        res["valid_time_s"] = time.time() - t0
        self.state.last_valid = {k: float(v) for k, v in res.items()}
        metric = self.cfg.valid.best_metric
        val = res.get(metric)
        improved = False
        if val is not None and math.isfinite(val):
            if self.state.best is None or (val < self.state.best if metric == "loss" else val > self.state.best):
                self.state.best = float(val)
                improved = True
        self.log.log("valid", self.state.num_updates, {**res, "best": self.state.best})
        logger.info("valid @%d: %s", self.state.num_updates,
                    " ".join(f"{k}={v:.4g}" for k, v in res.items() if isinstance(v, float)))
        return improved

    # ----------------------------------------------------------------- loop
    def _handle_nan(self, result: UpdateResult) -> None:
        self.state.nan_skipped += 1
        self.state.consecutive_nan += 1
        self.state.nan_batch_ids.append(list(result.batch_ids))
        self.state.nan_batch_ids = self.state.nan_batch_ids[-self.cfg.optim.max_consecutive_nan:]
        self.log.log("nan", self.state.num_updates, {"nan_skipped": self.state.nan_skipped,
                                                     "consecutive": self.state.consecutive_nan,
                                                     "batch_ids": result.batch_ids})
        logger.warning("non-finite loss/gradient at update %d: skipped (%d in a row, %d total); batch ids %s",
                       self.state.num_updates + 1, self.state.consecutive_nan, self.state.nan_skipped,
                       result.batch_ids)
        if self.state.consecutive_nan >= self.cfg.optim.max_consecutive_nan:
            ids = self.state.nan_batch_ids[-self.state.consecutive_nan:]
            raise TrainingDivergedError(
                f"{self.state.consecutive_nan} consecutive updates had a non-finite loss or gradient "
                f"(optim.max_consecutive_nan={self.cfg.optim.max_consecutive_nan}; {self.state.nan_skipped} "
                f"skipped in total) after update {self.state.num_updates}; batch ids: "
                + "; ".join(",".join(x) for x in ids))

    def _done(self) -> bool:
        strategy_done = getattr(self.strategy, "training_done", None)
        if strategy_done is not None:  # e.g. a parameter-server worker runs until the server stops it
            verdict = strategy_done()
            if verdict is not None:
                return bool(verdict)
        if self.state.num_updates >= self.cfg.optim.max_update:
            return True
        sth = self.cfg.optim.stop_time_hours
        if sth and self.state.train_time_s >= sth * 3600.0:
            return True
        me = self.cfg.optim.max_epoch
        return bool(me and (self.train_iter.epoch > me or (self.train_iter.epoch == me and self.train_iter.end_of_epoch)))

    def train_step(self) -> UpdateResult:
        """Draw ``update_freq`` micro-batches, run one update via the strategy, handle NaN."""
        u = self.state.num_updates
        t0 = time.perf_counter()
        n_micro = self.cfg.optim.update_freq if getattr(self.strategy, "needs_batches", True) else 0
        prep = self.compiler.prepare if self.compiler is not None else (lambda b: b)
        micro = [prep(self.train_iter.next_batch()).to(self.device) for _ in range(n_micro)]
        self._loader_s += time.perf_counter() - t0
        self._padded_frames += sum(int(b.fbank.shape[0] * b.fbank.shape[1]) for b in micro)
        waitks = [self.waitk.sample(u, j) for j in range(len(micro))]
        try:
            result = self.strategy.run_update(self.model, self.criterion, self.optimizer, self.scheduler, micro,
                                              waitks, self.cfg.optim.clip_norm)
        except Exception as e:  # noqa: BLE001 - a compiled step that fails is rerun eager (a real error recurs)
            if self.compiler is None or self.compiler.mode is False:
                raise
            self.compiler.fall_back(e)
            self.model.zero_grad(set_to_none=True)
            result = self.strategy.run_update(self.model, self.criterion, self.optimizer, self.scheduler, micro,
                                              waitks, self.cfg.optim.clip_norm)
        if result.skipped:
            self._handle_nan(result)
        else:
            self.state.consecutive_nan = 0
            self.state.num_updates += 1
        return result

    def train(self) -> TrainState:
        """Run until ``optim.max_update`` (or ``max_epoch``); validates and saves on schedule and at the
        end. Raises :class:`TrainingDivergedError` after too many NaN updates in a row."""
        cfg = self.cfg
        bar = None
        if cfg.logging.progress_bar and self.is_main:
            from tqdm import tqdm

            bar = tqdm(total=cfg.optim.max_update, initial=self.state.num_updates, desc="train", unit="upd",
                       dynamic_ncols=True)
        acc: dict[str, float] = {}
        dacc: dict[str, float] = {}
        t_last = time.time()
        self._loader_s, self._padded_frames = 0.0, 0
        n_in_window = 0
        try:
            while not self._done():
                t_step = time.time()
                res = self.train_step()
                self.state.train_time_s += time.time() - t_step
                if res.skipped:
                    continue
                u = self.state.num_updates
                n_in_window += 1
                for k, v in res.stats.items():
                    acc[k] = acc.get(k, 0.0) + v
                acc["gnorm"] = acc.get("gnorm", 0.0) + res.grad_norm
                for k, v in res.dist_stats.items():
                    dacc[k] = max(dacc.get(k, v), v) if k.endswith("_max") else dacc.get(k, 0.0) + v
                if bar is not None:
                    bar.update(1)
                    nt = max(res.stats.get("ntokens", 1.0), 1.0)
                    bar.set_postfix(loss=f"{res.stats.get('loss', float('nan')) / nt:.3f}",
                                    lr=f"{self.scheduler.get_last_lr():.2e}", refresh=False)
                if u % cfg.logging.log_interval == 0 or self._done():
                    dt = max(time.time() - t_last, 1e-9)
                    self.log.log("train", u, {**self._summarise(acc, n_in_window, dt),
                                              **summarise_dist_stats(dacc, n_in_window, dt)})
                    acc, dacc, n_in_window, t_last = {}, {}, 0, time.time()
                    self._loader_s, self._padded_frames = 0.0, 0
                vi, si = cfg.valid.interval_updates, cfg.checkpoint.save_interval_updates
                improved = False
                if vi and u % vi == 0:
                    improved = self.validate()
                if si and u % si == 0:
                    self.save(numbered=True, best=improved)
                elif improved:
                    self.save_best_only()
            # end of training: the strategy winds down (a parameter server stops its workers), then the
            # final validation/save unless just done
            finish = getattr(self.strategy, "finish", None)
            if finish is not None:
                finish()
            u = self.state.num_updates
            if cfg.optim.stop_time_hours and u < cfg.optim.max_update:
                logger.info("stop_time_hours=%g: stopped after %.1f s of training at update %d",
                            cfg.optim.stop_time_hours, self.state.train_time_s, u)
            improved = False
            if not (cfg.valid.interval_updates and u % cfg.valid.interval_updates == 0) and u > 0:
                improved = self.validate()
            if self._last_saved_update != u:
                self.save(numbered=True, best=improved)
            elif improved:
                self.save_best_only()
        finally:
            if bar is not None:
                bar.close()
            self.log.close()
        return self.state

    def _summarise(self, acc: dict[str, float], n: int, dt: float) -> dict[str, Any]:
        nt = max(acc.get("ntokens", 0.0), 1.0)
        out: dict[str, Any] = {"loss": acc.get("loss", 0.0) / nt, "nll_loss": acc.get("nll_loss", 0.0) / nt,
                               "lr": self.scheduler.get_last_lr(), "gnorm": acc.get("gnorm", 0.0) / max(n, 1),
                               "frames_per_s": acc.get("n_frames", 0.0) / dt, "updates_per_s": n / dt,
                               "epoch": self.train_iter.epoch, "nan_skipped": self.state.nan_skipped,
                               "train_time_s": round(self.state.train_time_s, 2),
                               # share of the window spent waiting for batches, and of padded frames
                               "loader_wait_pct": 100.0 * self._loader_s / dt}
        padded = self._padded_frames
        if padded:
            out["padding_pct"] = 100.0 * max(0.0, 1.0 - acc.get("n_frames", 0.0) / padded)
        for k, v in acc.items():
            if k.startswith("loss_") or k.startswith("nll_"):
                lang = k.split("_", 1)[1]
                ntl = acc.get(f"ntokens_{lang}", 0.0)
                if ntl > 0:
                    out[k] = v / ntl
        if "ctc_loss" in acc:
            out["ctc_loss"] = acc["ctc_loss"] / max(acc.get("src_ntokens", 0.0), 1.0)
        if self.compiler is not None:
            out.update(self.compiler.window_stats())
        return out


def summarise_dist_stats(acc: dict[str, float], n: int, dt: float) -> dict[str, float]:
    """Per-log-interval values of :attr:`UpdateResult.dist_stats` accumulated over ``n`` updates in ``dt``
    seconds: ``*_max`` keys hold the maximum (kept), ``*_count`` keys a sum (reported as ``*_per_s``),
    every other key a sum (reported as the mean per update)."""
    out: dict[str, float] = {}
    for k, v in acc.items():
        if k.endswith("_max"):
            out[k] = v
        elif k.endswith("_count"):
            out[k[: -len("_count")] + "_per_s"] = v / max(dt, 1e-9)
        else:
            out[k] = v / max(n, 1)
    return out


# ------------------------------------------------------------------------------------------ recipe


def training_augmentation(cfg: TrainConfig, data_dir: str | Path) -> tuple[str, Any]:
    """The training manifest and feature augmentation that ``cfg.data.augment`` asks for.

    Returns:
        ``(split, augment)``: ``data.train_subset``, or the name of its speed-perturbed manifest when
        ``data.augment.speed_perturb`` is set; a :class:`mmst.data.augment.FeatureAugment` (SpecAugment,
        seeded with ``cfg.seed``) or ``None``.

    Raises:
        mmst.data.augment.SpeedPerturbError: the DATA has no speed-perturbed copy with those factors.
    """
    from mmst.data.augment import FeatureAugment, specaugment_from_config, speed_perturbed_split
    from mmst.data.dataset import load_data_config

    acfg = cfg.data.augment
    split = cfg.data.train_subset
    if acfg.speed_perturb is not None and sorted(acfg.speed_perturb) != [1.0]:
        split = speed_perturbed_split(load_data_config(data_dir), split, acfg.speed_perturb, str(data_dir))
    spec = specaugment_from_config(acfg.specaugment_policy, acfg.specaugment, where="data.augment.specaugment")
    augment = FeatureAugment(spec, cfg.seed) if spec is not None and spec.active else None
    if augment is not None or split != cfg.data.train_subset:
        logger.info("training augmentation: manifest %s.tsv; SpecAugment %s", split,
                    spec.to_dict() if augment is not None and spec is not None else "off")
    return split, augment


def waveform_time_masks(augment: Any, speed_perturbed: bool) -> Any:
    """The SpecAugment time masks of ``augment`` for a waveform (pretrained) encoder, which applies them
    to its own frames (:meth:`mmst.models.hf_encoder.HFSpeechEncoder.set_time_masking`); None when off.

    Raises:
        ConfigError: frequency masks or time warping (they need fbank features), or speed perturbation
            (its copies exist as fbank only).
    """
    if speed_perturbed:
        raise ConfigError("data.augment.speed_perturb: the speed-perturbed copies are fbank features; a "
                          "waveform encoder (encoder_type: hf) reads the original audio (remove speed_perturb)")
    spec = None if augment is None else augment.specaugment
    if spec is None:
        return None
    if spec.freq_mask_N or spec.time_warp_W:
        raise ConfigError("data.augment.specaugment: a waveform encoder (encoder_type: hf) takes time masks "
                          "only (set freq_mask_N: 0 and time_warp_W: 0)")
    return spec if spec.time_mask_N else None


def build_trainer(cfg: TrainConfig, data_dir: str | Path, save_dir: str | Path, strategy: Any = None) -> Trainer:
    """Build every component from ``cfg`` + DATA, resume from ``SAVE_DIR/checkpoint_last.pt`` if present,
    else start from ``checkpoint.init_from`` (a model folder or checkpoint: its architecture and weights)
    or from scratch (with ``checkpoint.load_pretrained_encoder_from``: the encoder's weights).

    Raises:
        mmst.models.checkpoint.CheckpointError: an unreadable ``checkpoint.init_from`` model.
        LanguageMismatchError: the manifest languages differ from the checkpoint model's.
        VocabMismatchError: the DATA vocab differs from the checkpoint's (or the ``init_from`` model's).
        mmst.training.config.ConfigError / ValueError: invalid model overrides (message names the key).
    """
    from mmst.data.dataset import MultiwayDataset, check_languages
    from mmst.losses import MultilingualCriterion
    from mmst.models import ModelConfig, build_model, model_config_for_size
    from mmst.models.checkpoint import load_model
    from mmst.training.pretrained import load_pretrained_encoder

    data_dir, save_dir = Path(data_dir), Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    device = resolve_device(cfg.device)
    slow_bf16 = bf16_warning(device, cfg.precision)
    if slow_bf16:
        logger.warning("%s", slow_bf16)
    seed_everything(cfg.seed)

    resume_ckpt = None
    last = save_dir / "checkpoint_last.pt"
    if cfg.checkpoint.resume and last.is_file():
        resume_ckpt = load_checkpoint(last)

    arch = cfg.model.arch
    model_cfg = None
    vocab_mode = "per_lang" if cfg.model.vocab == "per_lang" else "joint"
    init_model, init_info = None, None
    if resume_ckpt is not None and resume_ckpt.get("model_cfg"):
        model_cfg = ModelConfig.from_dict(resume_ckpt["model_cfg"])
        warn_override_changes(cfg, resume_ckpt, last)
        arch = model_cfg.arch
    elif resume_ckpt is None and cfg.checkpoint.init_from:
        init_model, init_info = load_model(cfg.checkpoint.init_from)  # a model folder or a checkpoint
        model_cfg = ModelConfig.from_dict(init_info["model_cfg"])
        arch, vocab_mode = model_cfg.arch, init_info.get("vocab_mode") or vocab_mode
    tgt_langs = cfg.data.tgt_langs
    if model_cfg is not None:
        from mmst.data.dataset import load_data_config

        data_langs = tgt_langs or list(load_data_config(data_dir)["tgt_langs"])
        check_languages(data_langs, model_cfg.tgt_langs, what=f"DATA {data_dir}",
                        against="checkpoint model" if init_model is None else f"model {cfg.checkpoint.init_from}")
        tgt_langs = list(model_cfg.tgt_langs)
    with_src = cfg.criterion.ctc_weight > 0
    input_kind = (model_cfg or ModelConfig(**cfg.model.overrides.as_dict())).input_kind
    common = dict(tgt_langs=tgt_langs, vocab_mode=vocab_mode, lang_tag_start=(arch == "unified"), with_src=with_src,
                  input_kind=input_kind)
    train_split, augment = training_augmentation(cfg, data_dir)
    time_mask = None
    if input_kind == "waveform":  # SpecAugment's time masks move to the pretrained encoder's frames
        time_mask, augment = waveform_time_masks(augment, train_split != cfg.data.train_subset), None
    train_ds = MultiwayDataset(data_dir, train_split, max_frames=min(cfg.data.max_frames, cfg.data.max_tokens),
                               cache_features=cfg.data.cache_features, augment=augment, **common)
    if train_ds.n_dropped:
        logger.warning("dropped %d training utterances longer than %d frames", train_ds.n_dropped,
                       min(cfg.data.max_frames, cfg.data.max_tokens))
    valid_ds = None
    if cfg.data.valid_subset and (data_dir / f"{cfg.data.valid_subset}.tsv").is_file():
        valid_ds = MultiwayDataset(data_dir, cfg.data.valid_subset, cache_features=cfg.data.cache_features, **common)

    if model_cfg is None:
        kw: dict[str, Any] = {}
        if vocab_mode == "per_lang":
            kw["vocab_sizes"] = {lang: len(v) for lang, v in train_ds.tgt_vocabs.items()}
            kw["vocab_size"] = max(kw["vocab_sizes"].values())
        else:
            kw["vocab_size"] = len(train_ds.joint_vocab)
            # every <lang:xx> of the joint vocab (also languages this model does not train): the unified
            # model starts each stream with its tag (the dataset's start ids are these tags), and
            # decoding of any model never writes a tag
            kw["lang_tag_ids"] = {lang: train_ds.joint_vocab.lang_tag_id(lang) for lang in train_ds.joint_vocab.langs}
        kw["src_vocab_size"] = len(train_ds.src_vocab) if (with_src and train_ds.src_vocab is not None) else 0
        try:
            model_cfg = model_config_for_size(cfg.model.size, arch=arch, tgt_langs=train_ds.tgt_langs,
                                              **kw, **cfg.model.overrides.as_dict())
            model_cfg = model_cfg.with_absolute_hf_encoder_path()  # checkpoints load from any directory
        except (TypeError, ValueError) as e:
            raise ValueError(f"model.overrides: {e}") from e
    # resumed or initialised: every weight comes from that model, a pretrained encoder's folder gives its config
    model = build_model(model_cfg, pretrained_weights=resume_ckpt is None and init_model is None)
    if time_mask is not None:
        model.encoder.set_time_masking(time_mask.time_mask_N, time_mask.time_mask_T, time_mask.time_mask_p)
    check_languages(train_ds.tgt_langs, model.tgt_langs, what=f"manifest {train_ds.split}.tsv")
    for ds in (train_ds, valid_ds):  # the model decides the first decoder input (bos or <lang:xx>)
        if ds is not None:
            ds.start_token_ids = {lang: model.start_token_id(lang) for lang in ds.tgt_langs}
    model.to(device)
    criterion = MultilingualCriterion(label_smoothing=cfg.criterion.label_smoothing,
                                      lang_weights=cfg.criterion.lang_weights, ctc_weight=cfg.criterion.ctc_weight,
                                      pad_id=model_cfg.pad_id)
    try:
        groups = layerwise_param_groups(model, cfg.optim.layer_lr_decay)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    optimizer = build_optimizer(groups, cfg.optim.lr, cfg.optim.betas, cfg.optim.eps,
                                cfg.optim.weight_decay, cfg.optim.implementation)
    scheduler = InverseSqrtSchedule(optimizer, cfg.optim.lr, cfg.optim.warmup_updates, cfg.optim.warmup_init_lr)
    train_items = train_ds
    if cfg.data.concat_utterances > 1:  # multi-sentence training: items are spans of consecutive utterances
        from mmst.data.spans import build_span_dataset, describe_spans

        train_items = build_span_dataset(train_ds, cfg.data.concat_utterances, cfg.seed, group=cfg.data.concat_group,
                                         pause_ms=cfg.data.concat_pause_ms,
                                         max_frames=min(cfg.data.max_frames, cfg.data.max_tokens))
        logger.info("multi-sentence training: %s", describe_spans(train_items.spans))
    train_iter = EpochBatchIterator(train_items, train_items.n_frames, train_items.collater, cfg.data.max_tokens,
                                    cfg.data.max_sentences, seed=cfg.seed, num_workers=cfg.data.num_workers)
    vocab_info = train_ds.vocab_info()
    extra = {"data_dir": str(data_dir.resolve()), "vocab": vocab_info, "tgt_langs": list(model.tgt_langs),
             "vocab_mode": vocab_mode}
    validator = Validator(valid_ds, criterion, cfg, device) if valid_ds is not None else None
    compiler = TrainingCompiler(cfg.compile, model, criterion, device, model_cfg.pad_id)
    if validator is not None and compiler.mode is True:  # the same buckets, not counted in bucket_pad_pct
        validator.prepare = functools.partial(pad_batch_to_buckets, pad_id=model_cfg.pad_id)
    trainer = Trainer(cfg, model, criterion, optimizer, scheduler, train_iter, save_dir, device, validator,
                      strategy, extra, compiler=compiler)
    if resume_ckpt is not None:
        check_vocab_compat(resume_ckpt.get("vocab", {}), vocab_info, where=f"checkpoint {last}")
        trainer.load_state_dict(resume_ckpt)
        n_dropped = trainer.log.resume_at(trainer.state.num_updates)
        if n_dropped:
            logger.info("train_log.jsonl: removed %d records logged after update %d by the interrupted run",
                        n_dropped, trainer.state.num_updates)
        logger.info("resumed from %s at update %d (epoch %d, offset %d)", last, trainer.state.num_updates,
                    train_iter.epoch, train_iter.offset)
        trainer.log.log("event", trainer.state.num_updates, {"resumed_from": str(last)})
    elif init_model is not None:
        check_vocab_compat(init_info.get("vocab") or {}, vocab_info, where=f"model {cfg.checkpoint.init_from} "
                           "(prepare the DATA with --vocab-from MODEL_DIR)")
        model.load_state_dict(init_model.state_dict())
        trainer.log.log("event", 0, {"init_from": str(cfg.checkpoint.init_from)})
        logger.info("initialised every weight from %s", cfg.checkpoint.init_from)
    elif cfg.checkpoint.load_pretrained_encoder_from:
        rep = load_pretrained_encoder(model, cfg.checkpoint.load_pretrained_encoder_from,
                                      allow_unsafe_pickle=cfg.checkpoint.allow_unsafe_pickle)
        trainer.log.log("event", 0, {"pretrained_encoder": cfg.checkpoint.load_pretrained_encoder_from,
                                     "loaded": len(rep.loaded), "not_loaded": rep.not_loaded,
                                     "missing": rep.missing})
    logger.info("model %s/%s: %d parameters; %d train utterances (%d batches/epoch); device %s",
                model_cfg.arch, model_cfg.size, sum(p.numel() for p in model.parameters()), len(train_ds),
                len(train_iter), device)
    return trainer


def override_changes(current: dict[str, Any], saved: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{field: (checkpoint value, current value)}`` for every ``model.overrides`` field that differs.

    Both arguments are ``{field: value}`` of the fields that are set (``None`` entries are ignored).
    """
    cur = {k: v for k, v in current.items() if v is not None}
    old = {k: v for k, v in (saved or {}).items() if v is not None}
    return {k: (old.get(k), cur.get(k)) for k in sorted(set(cur) | set(old)) if cur.get(k) != old.get(k)}


def warn_override_changes(cfg: TrainConfig, ckpt: dict[str, Any], path: str | Path) -> dict[str, tuple[Any, Any]]:
    """Warn (naming each field) when ``cfg.model.overrides`` differs from the checkpoint's.

    A resumed run rebuilds the model from the checkpoint's ``model_cfg``, so changed overrides have no
    effect; the warning says so. Returns the differences (see :func:`override_changes`).
    """
    saved = ((ckpt.get("config") or {}).get("model") or {}).get("overrides") or {}
    diff = override_changes(cfg.model.overrides.as_dict(), saved)
    if diff:
        logger.warning(
            "resuming from %s: model.overrides differ from the checkpoint's (%s); the model is rebuilt from the "
            "checkpoint, so these changes are ignored", path,
            ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items()))
    return diff
