"""``mmst-train --distributed ddp|dropcompute|param-server``: the trainer's adapters over :mod:`mmst.distributed`.

The trainer (:mod:`mmst.training.strategy`) calls, per update,
``strategy.run_update(model, criterion, optimizer, scheduler, micro_batches, waitks, clip_norm)``, and
``strategy.setup(trainer)`` once. These adapters run the modes of this package on the shared step
(:func:`mmst.training.step.compute_loss` / :func:`~mmst.training.step.optimizer_step`):

* loss normalisation: each rank back-propagates ``loss / (target tokens of its M micro-batches)``
  (the single-process normaliser of the rank's share); DDP then averages over ranks, so the global
  gradient uses the nominal normaliser ``1/(N * per-rank tokens)``. DropCompute keeps that nominal
  normaliser for dropped micro-batches (they contribute zero).
* data sharding: ``setup`` restricts the trainer's ``EpochBatchIterator`` to every N-th batch
  (``batches[rank::N]``, truncated to a common length) of the same seeded epoch order.
* only rank 0 logs, validates and writes checkpoints (``is_main_process``).
* ``param-server``: rank 0 runs the whole server loop inside its first ``run_update`` (after any
  checkpoint resume; it owns the trainer's optimizer and LR schedule; one optimizer step per pushed
  gradient; training ends after ``optim.max_update`` updates), then the trainer finds the update
  budget spent, validates and saves.
  Ranks >= 1 push one gradient per ``run_update`` and stop when the server says so.

Options (keyword arguments of the factories; ``mmst-train`` forwards them from its config / flags):
``dist_timeout`` (s), ``backend``, ``compute_threshold`` (s | ``auto`` | ``inf``), ``auto_steps``,
``max_drop_rate``, ``max_staleness``, ``staleness_lr``, ``worker_timeout`` (s), ``straggler_delay``,
``straggler_fraction``, ``straggler_base_ms``, ``slow_rank``, ``seed``, ``find_unused_parameters``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from mmst.distributed.ddp import DDPStrategy
from mmst.distributed.dropcompute import DropComputeStrategy, parse_threshold
from mmst.distributed.env import DEFAULT_TIMEOUT_S, init_distributed
from mmst.distributed.param_server import ParamServer, ParamWorker
from mmst.distributed.stragglers import StragglerInjector, parse_delay_spec, parse_slow_rank
from mmst.training.step import UpdateResult, clip_grad_norm, compute_loss, merge_stats, optimizer_step

_KNOWN = {"dist_timeout", "backend", "compute_threshold", "auto_steps", "max_drop_rate", "max_staleness",
          "staleness_lr", "worker_timeout", "straggler_delay", "straggler_fraction", "straggler_base_ms",
          "slow_rank", "seed", "find_unused_parameters"}


def _result(stats: dict[str, float], gnorm: float, ids: list[str]) -> UpdateResult:
    return UpdateResult(stats=stats, grad_norm=gnorm, skipped=not math.isfinite(gnorm), batch_ids=ids)


class _Base:
    """Common set-up: process group, straggler injector, data sharding (see module docstring).

    Raises:
        ValueError: an unknown option or a malformed option value.
        DistributedError: the process group could not be formed within ``dist_timeout``.
    """

    def __init__(self, **options: Any) -> None:
        unknown = set(options) - _KNOWN
        if unknown:
            raise ValueError(f"unknown distributed option(s) {sorted(unknown)}; known: {sorted(_KNOWN)}")
        self.opts = options
        self.env = init_distributed(options.get("backend"), float(options.get("dist_timeout") or DEFAULT_TIMEOUT_S))
        base_ms = options.get("straggler_base_ms")
        self.injector = StragglerInjector(parse_delay_spec(options.get("straggler_delay")), self.env.rank,
                                          int(options.get("seed") or 0), float(options.get("straggler_fraction") or 1.0),
                                          base_ms / 1000.0 if base_ms is not None else None,
                                          parse_slow_rank(options.get("slow_rank")))
        self.trainer: Any = None
        self.last_step: Any = None

    @property
    def is_main_process(self) -> bool:
        """Rank 0 logs, validates and saves."""
        return self.env.rank == 0

    def _shard(self, trainer: Any, rank: int, world: int) -> None:
        it = getattr(trainer, "train_iter", None)
        if it is None or world <= 1 or getattr(it, "_mmst_sharded", False):
            return
        if hasattr(it, "shard"):  # public API, if the trainer provides one
            it.shard(rank, world)
            it._mmst_sharded = True
            return
        orig = it.batches_for_epoch

        def sharded(epoch: int) -> list[list[int]]:
            b = orig(epoch)
            n = max(1, len(b) // world)
            return (b[rank::world] + b[:world])[:n]

        it.batches_for_epoch = sharded
        it._mmst_sharded = True

    def setup(self, trainer: Any) -> None:
        """Keep a handle on the trainer and shard its training data by rank."""
        self.trainer = trainer
        self._shard(trainer, self.env.rank, self.env.world_size)

    def _loss_fn(self, criterion: Any, collected: list[dict[str, Any]]) -> Any:
        def fn(model: torch.nn.Module, item: tuple[Any, int | None]) -> tuple[torch.Tensor, dict[str, Any]]:
            batch, k = item
            loss, st = compute_loss(model, batch, criterion, k,
                                    precision=getattr(self.trainer.cfg, "precision", "auto"))
            st = dict(st)
            st["loss"] = float(loss.detach())
            st["n_frames"] = getattr(batch, "n_frames", 0)
            collected.append(st)
            return loss, st

        return fn


class TrainerDDP(_Base):
    """``--distributed ddp`` for the MMST trainer (DDP + no_sync accumulation)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.core = DDPStrategy(self.env, self.injector, bool(options.get("find_unused_parameters", True)))
        self._wrapped: Any = None

    def setup(self, trainer: Any) -> None:
        """Shard the data and wrap ``trainer.model`` in DDP (the trainer keeps the unwrapped module)."""
        super().setup(trainer)
        self._wrapped = self.core.wrap(trainer.model)

    def run_update(self, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
                   micro_batches: list[Any], waitks: list[int | None], clip_norm: float) -> Any:
        """One synchronous update (see module docstring); returns ``UpdateResult``."""
        wrapped = self._wrapped if self._wrapped is not None else self.core.wrap(model)
        self._wrapped = wrapped
        collected: list[dict[str, Any]] = []
        scale = 1.0 / max(1, sum(int(b.total_ntokens) for b in micro_batches))
        model.train()
        self.last_step = self.core.step(wrapped, list(zip(micro_batches, waitks)), self._loss_fn(criterion, collected),
                                        scale)
        stats: dict[str, float] = {}
        for st in collected:
            merge_stats(stats, st)
        gnorm = optimizer_step(model, optimizer, scheduler, clip_norm)
        return _result(stats, gnorm, [i for b in micro_batches for i in b.ids])


class TrainerDropCompute(TrainerDDP):
    """``--distributed dropcompute`` for the MMST trainer; adds ``dc_*`` entries to the update stats."""

    def __init__(self, **options: Any) -> None:
        _Base.__init__(self, **options)
        thr = parse_threshold(options.get("compute_threshold", "auto"))
        self.core = DropComputeStrategy(self.env, thr, int(options.get("auto_steps") or 10), self.injector,
                                        options.get("max_drop_rate"), int(options.get("seed") or 0))
        self._wrapped = None

    def run_update(self, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
                   micro_batches: list[Any], waitks: list[int | None], clip_norm: float) -> Any:
        """One DropCompute update; stats gain ``dc_drop_rate``, ``dc_tau_s``, ``dc_compute_s``, ``dc_step_s``."""
        res = super().run_update(model, criterion, optimizer, scheduler, micro_batches, waitks, clip_norm)
        st = self.last_step
        res.stats.update(dc_drop_rate=st.drop_rate, dc_tau_s=st.tau_s if math.isfinite(st.tau_s) else -1.0,
                         dc_compute_s=st.compute_s, dc_step_s=st.step_time_s)
        return res


class TrainerParamServer(_Base):
    """``--distributed param-server`` for the MMST trainer (rank 0 = server, see module docstring)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.worker: ParamWorker | None = None
        self.server_stats: dict[str, Any] = {}
        self._version = 0
        self._stopped = False

    def setup(self, trainer: Any) -> None:
        """Keep the trainer; workers shard the data (rank r >= 1 reads shard r-1 of W-1)."""
        self.trainer = trainer
        if self.env.rank != 0:
            self._shard(trainer, self.env.rank - 1, self.env.world_size - 1)

    def _serve(self) -> Any:
        """Rank 0, first ``run_update`` (i.e. after any checkpoint resume): serve the remaining budget."""
        tr = self.trainer
        budget = int(tr.cfg.optim.max_update) - int(tr.state.num_updates)
        srv = ParamServer(self.env, tr.model, tr.optimizer, max(0, budget), self.opts.get("max_staleness"),
                          bool(self.opts.get("staleness_lr", False)), self.opts.get("worker_timeout"),
                          lr_scheduler=tr.scheduler)
        self.server_stats = srv.serve()
        self._stopped = True
        # the trainer adds 1 for this call: leave it exactly at max_update, so it validates and saves
        tr.state.num_updates += max(0, srv.version - 1)
        st = {k: float(v) for k, v in self.server_stats.items() if isinstance(v, (int, float))}
        return _result({"ps_" + k: v for k, v in st.items()}, 0.0, [])

    def run_update(self, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
                   micro_batches: list[Any], waitks: list[int | None], clip_norm: float) -> Any:
        """Server (rank 0): run the whole server loop once. Worker: compute the gradient of this update,
        push it, load the returned parameters."""
        from mmst.distributed.param_server import PULL, PUSH, flat_grads

        if self.env.rank == 0:
            if self.trainer is None:
                raise RuntimeError("param-server: setup(trainer) was not called")
            return self._serve()
        if self.worker is None:
            self.worker = ParamWorker(self.env, model, self.injector)
            self._version, self._stopped = self.worker._exchange(PULL, 0, 0.0, 0.0, None)
        if self._stopped:
            self._finish()
            return _result({}, 0.0, [])
        collected: list[dict[str, Any]] = []
        fn = self._loss_fn(criterion, collected)
        scale = 1.0 / max(1, sum(int(b.total_ntokens) for b in micro_batches))
        model.train()
        for item in zip(micro_batches, waitks):
            loss, _ = fn(model, item)
            self.injector.delay()
            (loss * scale).backward()
        params = [p for p in model.parameters() if p.requires_grad]
        gnorm = clip_grad_norm(params, clip_norm)
        g = flat_grads(model)
        for p in params:
            p.grad = None
        stats: dict[str, float] = {}
        for st in collected:
            merge_stats(stats, st)
        self._version, self._stopped = self.worker._exchange(PUSH, self._version, float(stats.get("nsentences", 0)),
                                                             float(stats.get("loss", 0.0)), g)
        if self._stopped:
            self._finish()
        return _result(stats, gnorm, [i for b in micro_batches for i in b.ids])

    def _finish(self) -> None:
        if self.worker is not None and not getattr(self, "_said_bye", False):
            self._said_bye = True
            self.worker.bye()
        if self.trainer is not None:  # the server has spent the budget: end this worker's loop
            self.trainer.state.num_updates = max(self.trainer.state.num_updates, int(self.trainer.cfg.optim.max_update) - 1)

