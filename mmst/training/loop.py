"""The single-process training loop (:class:`Trainer`) over injected parts.

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

import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mmst.data.batching import EpochBatchIterator
from mmst.training.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointManager,
    get_rng_state,
    remove_stale_temp_files,
    set_rng_state,
)
from mmst.training.compile import TrainingCompiler
from mmst.training.config import TrainConfig, config_to_dict, normalize_waitk_list
from mmst.training.optim import InverseSqrtSchedule, set_optimizer_implementation
from mmst.training.strategy import SingleProcessStrategy, UpdateResult
from mmst.training.train_log import TrainLogger
from mmst.training.validation import Validator

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
    Elbayad et al. 2020). Deterministic in ``(seed, update, index)`` so resume needs no state.

    ``index`` is the micro-batch's place in the whole update: on ``data_ranks`` data ranks, each reading every
    ``data_ranks``-th batch from ``data_rank`` on (:mod:`mmst.training.distributed`), a rank's ``j``-th
    micro-batch is ``j * data_ranks + data_rank`` (:meth:`index_of`), so the ranks draw the ks that one
    process would draw for the same micro-batches, not each the same."""

    def __init__(self, spec: Any, seed: int) -> None:
        self.choices = normalize_waitk_list(spec)
        self.seed = int(seed)
        self.data_rank, self.data_ranks = 0, 1

    def index_of(self, j: int) -> int:
        """The update-wide index of this rank's ``j``-th micro-batch (class docstring)."""
        return j * self.data_ranks + self.data_rank

    def sample(self, update: int, index: int) -> int | None:
        """wait-k (int >= 1, or None = offline) of micro-batch ``index`` of update ``update`` (0-based)."""
        if len(self.choices) == 1:
            return self.choices[0]
        rng = np.random.default_rng([self.seed, 7919, int(update), int(index)])
        return self.choices[int(rng.integers(len(self.choices)))]


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
        waitks = [self.waitk.sample(u, self.waitk.index_of(j)) for j in range(len(micro))]
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
