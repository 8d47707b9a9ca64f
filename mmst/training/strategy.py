"""Update strategies: how one optimiser update is computed from a list of micro-batches.

The trainer is strategy-agnostic: every update it draws ``update_freq`` micro-batches and one wait-k per
micro-batch, then calls ``strategy.run_update(...)``. The default :class:`SingleProcessStrategy` does
plain gradient accumulation. The distributed ones (``ddp``, ``dropcompute``, ``param-server``,
adapters in :mod:`mmst.training.distributed` over :mod:`mmst.distributed`) are listed in the registry
below; :func:`register_strategy` adds others. ``mmst-train --distributed NAME`` picks one.

A strategy must implement::

    run_update(model, criterion, optimizer, scheduler, micro_batches, waitks, clip_norm) -> UpdateResult

and may implement ``setup(trainer)`` (called once when the :class:`~mmst.training.loop.Trainer` is
built; e.g. create a DDP wrapper and keep it on the strategy) and ``is_main_process`` (bool; only the main
process logs, validates and writes checkpoints). Optional hooks: ``needs_batches`` (bool, default True;
False: the trainer draws no micro-batches for this process, e.g. a parameter server), ``training_done()``
(``True``/``False`` overrides the trainer's own end criteria, ``None`` keeps them; e.g. a parameter-server
worker runs until the server stops it) and ``finish()`` (called once after the last update, before the
final validation and save). ``UpdateResult.dist_stats`` carries the mode's own numbers, logged per log
interval. Keep ``trainer.model`` the UNWRAPPED model so checkpoints hold plain
parameter names (no ``module.`` prefix); ``run_update`` receives it and may use its own wrapper instead.
Per-rank data sharding: the trainer draws ``update_freq`` micro-batches from its iterator per update; a
distributed strategy can replace ``trainer.train_iter`` in ``setup`` (e.g. a sharded iterator with the
same ``next_batch``/``state_dict``/``load_state_dict``/``epoch``/``end_of_epoch`` interface).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from mmst.training.distributed import TrainerDDP, TrainerDropCompute, TrainerParamServer
from mmst.training.step import StrategyError, UpdateResult, compute_loss, merge_stats, optimizer_step

__all__ = ["StrategyError", "UpdateResult", "SingleProcessStrategy", "available_strategies", "build_strategy",
           "register_strategy"]


class SingleProcessStrategy:
    """Single-process gradient accumulation.

    Loss normalisation: ``sum(loss_i) / sum(ntokens_i)`` over the micro-batches of the update, i.e. each
    micro-batch is back-propagated with ``scale = 1 / total_ntokens`` (total known in advance from the
    batches). A non-finite micro-batch loss or gradient norm skips the update (gradients zeroed, no
    optimiser or LR step) and returns ``skipped=True``.

    ``precision`` (``auto``/``fp32``/``bf16``, see :func:`mmst.training.step.autocast_dtype`) is taken
    from the trainer's config in :meth:`setup`.
    """

    is_main_process = True

    def __init__(self, precision: str = "auto") -> None:
        self.precision = precision

    def setup(self, trainer: Any) -> None:
        """Take the forward precision from ``trainer.cfg.precision``."""
        self.precision = getattr(trainer.cfg, "precision", self.precision)

    def run_update(self, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer,
                   scheduler: Any, micro_batches: list[Any], waitks: list[int | None],
                   clip_norm: float) -> UpdateResult:
        """Forward/backward every micro-batch, then one optimiser step (see class docstring)."""
        if len(micro_batches) != len(waitks):
            raise ValueError("run_update: one wait-k per micro-batch expected")
        total_ntokens = sum(b.total_ntokens for b in micro_batches)
        scale = 1.0 / max(total_ntokens, 1)
        stats: dict[str, float] = {}
        ids = [i for b in micro_batches for i in b.ids]
        model.train()
        for batch, k in zip(micro_batches, waitks):
            loss, st = compute_loss(model, batch, criterion, k, precision=self.precision)
            if not torch.isfinite(loss):
                optimizer.zero_grad(set_to_none=True)
                return UpdateResult(stats=stats, grad_norm=float("nan"), skipped=True, batch_ids=ids)
            (loss * scale).backward()
            st = dict(st)
            st["loss"] = float(loss.detach())
            st["n_frames"] = batch.n_frames
            merge_stats(stats, st)
        gnorm = optimizer_step(model, optimizer, scheduler, clip_norm)
        return UpdateResult(stats=stats, grad_norm=gnorm, skipped=not math.isfinite(gnorm), batch_ids=ids)


def _single_process(**options: Any) -> SingleProcessStrategy:
    if options:
        raise ValueError(f"distributed options {sorted(options)} need --distributed ddp|dropcompute|param-server "
                         "(the single-process strategy 'none' takes none)")
    return SingleProcessStrategy()


_REGISTRY: dict[str, Callable[..., Any]] = {
    "none": _single_process,
    "ddp": TrainerDDP,
    "dropcompute": TrainerDropCompute,
    "param-server": TrainerParamServer,
}
"""``--distributed`` name -> ``factory(**options) -> strategy``; the built-in strategies, listed here."""


def register_strategy(name: str, factory: Callable[..., Any]) -> None:
    """Register ``factory(**options) -> strategy`` under ``name`` (for ``mmst-train --distributed``).

    Raises:
        ValueError: ``name`` is already registered.
    """
    if name in _REGISTRY:
        raise ValueError(f"--distributed strategy {name!r} is already registered")
    _REGISTRY[name] = factory


def available_strategies() -> list[str]:
    """Registered strategy names (``none`` = single process)."""
    return sorted(_REGISTRY)


def build_strategy(name: str = "none", **options: Any) -> Any:
    """Instantiate a registered strategy; raises ValueError naming the known ones."""
    names = available_strategies()
    if name not in _REGISTRY:
        raise ValueError(f"unknown --distributed strategy {name!r}; available: {names}")
    return _REGISTRY[name](**options)
