"""Optimiser and learning-rate schedule: AdamW + inverse square root with linear warmup.

The schedule is fairseq's ``inverse_sqrt`` (Vaswani et al. 2017, sec. 5.3, with a linear warmup from
``warmup_init_lr``)::

    lr(u) = warmup_init_lr + u * (lr - warmup_init_lr) / warmup_updates     for u <  warmup_updates
    lr(u) = lr * sqrt(warmup_updates / u)                                   for u >= warmup_updates

where ``u`` is the number of completed updates (``u = 0`` before the first step). The schedule's state
is just ``num_updates`` so it saves/loads with primitive types only.

Layer-wise learning-rate decay (``optim.layer_lr_decay = d``, Clark et al. 2020, ELECTRA; used for
pretrained speech encoders): a parameter of a pretrained encoder at depth ``n`` from its top layer
(:meth:`mmst.models.hf_encoder.HFSpeechEncoder.lr_depths`) trains at ``lr(u) * d ** n``; every other
parameter at ``lr(u)``. Each optimiser group carries its factor as ``lr_scale``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

#: ``implementation`` -> ``torch.optim.AdamW`` keyword arguments.
_IMPL_KWARGS: dict[str, dict[str, bool]] = {"fused": {"fused": True, "foreach": False},
                                            "foreach": {"fused": False, "foreach": True},
                                            "for-loop": {"fused": False, "foreach": False}}


def layerwise_param_groups(model: torch.nn.Module, layer_lr_decay: float = 1.0) -> list[dict[str, Any]]:
    """Optimiser groups ``[{"params": [...], "lr_scale": d ** n}, ...]`` (see the module docstring).

    ``layer_lr_decay = 1`` gives one group with every parameter. Parameters that do not require grad
    (frozen) are left out.

    Raises:
        ValueError: ``layer_lr_decay`` outside ``(0, 1]``, or ``< 1`` for a model whose encoder has no
            pretrained layers (no ``lr_depths``).
    """
    if not 0.0 < layer_lr_decay <= 1.0:
        raise ValueError(f"optim.layer_lr_decay must be in (0, 1], got {layer_lr_decay}")
    trainable = [p for p in model.parameters() if p.requires_grad]
    if layer_lr_decay == 1.0:
        return [{"params": trainable, "lr_scale": 1.0}]
    depths = getattr(getattr(model, "encoder", None), "lr_depths", None)
    if depths is None:
        raise ValueError("optim.layer_lr_decay < 1 applies to a pretrained encoder's layers "
                         "(model.overrides.encoder_type: hf); this model has none")
    by_scale: dict[float, list[torch.nn.Parameter]] = {}
    seen: set[int] = set()
    for ps, depth in depths():
        by_scale.setdefault(layer_lr_decay ** depth, []).extend(ps)
        seen.update(id(p) for p in ps)
    by_scale.setdefault(1.0, []).extend(p for p in trainable if id(p) not in seen)
    return [{"params": ps, "lr_scale": scale} for scale, ps in sorted(by_scale.items(), reverse=True) if ps]


def build_optimizer(params: Iterable[torch.nn.Parameter] | Iterable[dict[str, Any]], lr: float, betas: tuple[float, float] | list[float],
                    eps: float = 1e-8, weight_decay: float = 0.0, implementation: str = "fused") -> torch.optim.AdamW:
    """AdamW over ``params`` that require grad (decoupled weight decay, Loshchilov & Hutter 2019).

    ``params``: parameters, or groups from :func:`layerwise_param_groups` (their ``lr_scale`` is applied
    by :class:`InverseSqrtSchedule`).

    ``implementation``: ``fused`` (one kernel for all parameters; on the ``s`` model's 27 M parameters a
    CPU step takes ~33 ms vs ~100 ms per-parameter, bench/NOTES.md), ``foreach`` or ``for-loop``. All are
    deterministic, so a resumed run is bit-exact as long as the implementation is unchanged (see
    :func:`set_optimizer_implementation` after loading a checkpoint).

    Raises:
        ValueError: unknown ``implementation``.
    """
    if implementation not in _IMPL_KWARGS:
        raise ValueError(f"optimizer implementation must be one of {sorted(_IMPL_KWARGS)}, got {implementation!r}")
    params = list(params)
    if params and isinstance(params[0], dict):
        params = [{**g, "params": [p for p in g["params"] if p.requires_grad]} for g in params]
        params = [g for g in params if g["params"]]
    else:
        params = [p for p in params if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                             **_IMPL_KWARGS[implementation])


def set_optimizer_implementation(optimizer: torch.optim.Optimizer, implementation: str) -> None:
    """Re-apply ``implementation`` to every param group (``Optimizer.load_state_dict`` restores the
    checkpoint's ``fused``/``foreach`` flags, which may differ from the configured ones)."""
    for g in optimizer.param_groups:
        g.update(_IMPL_KWARGS[implementation])


class InverseSqrtSchedule:
    """Inverse-sqrt LR schedule with linear warmup; call :meth:`step` once per optimiser update.

    Args:
        optimizer: its param groups' ``lr`` is set on construction and on every :meth:`step` (times
            the group's ``lr_scale``, 1 when absent).
        lr: peak learning rate (reached at ``warmup_updates``).
        warmup_updates: warmup length in updates (0 = no warmup: ``lr`` then decay from update 1).
        warmup_init_lr: learning rate at update 0.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, lr: float, warmup_updates: int,
                 warmup_init_lr: float = 1e-7) -> None:
        if lr < 0 or warmup_updates < 0 or warmup_init_lr < 0:
            raise ValueError("InverseSqrtSchedule: lr, warmup_updates, warmup_init_lr must be >= 0")
        self.optimizer = optimizer
        self.peak_lr = float(lr)
        self.warmup_updates = int(warmup_updates)
        self.warmup_init_lr = float(warmup_init_lr) if warmup_updates > 0 else float(lr)
        self.num_updates = 0
        self._apply()

    def lr_at(self, num_updates: int) -> float:
        """Learning rate after ``num_updates`` completed updates (formula in the module docstring)."""
        u = num_updates
        if self.warmup_updates > 0 and u < self.warmup_updates:
            return self.warmup_init_lr + u * (self.peak_lr - self.warmup_init_lr) / self.warmup_updates
        w = max(self.warmup_updates, 1)
        return self.peak_lr * math.sqrt(w / max(u, 1))

    def get_last_lr(self) -> float:
        """The learning rate currently set on the optimiser."""
        return self.lr_at(self.num_updates)

    def _apply(self) -> None:
        lr = self.lr_at(self.num_updates)
        for g in self.optimizer.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)

    def step(self) -> float:
        """Advance by one completed update and set the new LR; returns it."""
        self.num_updates += 1
        self._apply()
        return self.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """Primitive-only state (safe for ``torch.load(weights_only=True)``)."""
        return {"num_updates": self.num_updates, "peak_lr": self.peak_lr,
                "warmup_updates": self.warmup_updates, "warmup_init_lr": self.warmup_init_lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``num_updates`` (schedule shape comes from the current config) and set the LR."""
        self.num_updates = int(state["num_updates"])
        self._apply()
