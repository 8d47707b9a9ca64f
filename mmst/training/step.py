"""The training step, shared by the single-process trainer and the distributed adapters.

* :func:`compute_loss` - forward pass + criterion for one micro-batch (no backward);
* :func:`optimizer_step` - clip, step, zero_grad, advance the LR schedule;
* :class:`UpdateResult` - what a strategy returns for one update.

The caller does ``(loss * scale).backward()`` in between, with ``scale`` = 1 / normaliser chosen by the
mode (single process: 1 / total target tokens of the update; see :mod:`mmst.training.strategy`).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch

#: ``precision`` values accepted by :func:`autocast_dtype` (config key ``precision``, flag ``--precision``).
PRECISIONS = ("auto", "fp32", "bf16")


def autocast_dtype(device: torch.device | str, precision: str = "auto") -> torch.dtype | None:
    """The autocast dtype of a forward pass, or ``None`` for plain fp32.

    ``auto``: bf16 on CUDA, fp32 on CPU; ``fp32``: never autocast; ``bf16``: bf16 autocast on any device
    (on CPUs with AMX or AVX512-BF16 it runs the matmuls in bf16 with fp32 master weights: mixed
    precision, Micikevicius et al. 2018; the loss is computed in fp32 by :mod:`mmst.losses`).

    Raises:
        ValueError: unknown ``precision``.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    dev = torch.device(device)
    if precision == "bf16" or (precision == "auto" and dev.type == "cuda"):
        return torch.bfloat16
    return None


#: CPU feature flags (``/proc/cpuinfo``) that mean native bf16 matmuls: x86 AVX512-BF16 and AMX-BF16,
#: Arm's BF16 extension.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_has_native_bf16() -> bool | None:
    """Whether this CPU computes bf16 matmuls natively (``None`` when it cannot be told).

    Reads the feature flags of ``/proc/cpuinfo`` (Linux): ``avx512_bf16`` or ``amx_bf16`` on x86,
    ``bf16`` on Arm. Without them (e.g. AVX2-only AMD EPYC / Intel CPUs) PyTorch emulates bf16 by
    converting to fp32 around every kernel, which is slower than plain fp32.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, val = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(val.split())
    if not flags:
        return None
    return bool(flags & NATIVE_BF16_FLAGS)


def bf16_warning(device: torch.device | str, precision: str) -> str | None:
    """A warning when ``precision`` asks for bf16 autocast on a CPU without native bf16, else ``None``.

    There bf16 is emulated and a training update is many times slower than in fp32 (see
    ``bench/bench_train.py``); the message says what to use instead.

    Raises:
        ValueError: unknown ``precision``.
    """
    if autocast_dtype(device, precision) is not torch.bfloat16 or torch.device(device).type != "cpu":
        return None
    if cpu_has_native_bf16() is not False:
        return None
    return ("precision=bf16 on a CPU without native bf16 (no AVX512-BF16 or AMX in /proc/cpuinfo): bf16 "
            "matmuls are emulated and run many times slower than fp32; use --precision fp32 (or auto) on this "
            "machine, bf16 on a GPU or a CPU with AVX512-BF16/AMX")


def autocast_context(device: torch.device | str, precision: str = "auto") -> contextlib.AbstractContextManager:
    """``torch.autocast`` for :func:`autocast_dtype` ``(device, precision)``; a no-op for fp32."""
    dtype = autocast_dtype(device, precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def compute_loss(model: torch.nn.Module, batch: Any, criterion: Any, waitk: int | None,
                 precision: str = "auto") -> tuple[torch.Tensor, dict[str, Any]]:
    """Forward one micro-batch and compute the (un-normalised) loss.

    Args:
        model: an ``MMSTModel``; called as ``model(fbank, fbank_lengths, prev_output_tokens, waitk=waitk)``.
        batch: :class:`mmst.data.batching.Batch` already on the model's device.
        criterion: ``mmst.losses.MultilingualCriterion``; ``criterion(output, batch) -> (loss, stats)``.
        waitk: wait-k lagging for the cross-attention mask (``None`` = offline).
        precision: ``auto`` (bf16 autocast on CUDA, fp32 on CPU), ``fp32`` or ``bf16`` (see
            :func:`autocast_dtype`).

    Returns:
        ``(loss, stats)``: ``loss`` a float32 scalar = SUM over target tokens (caller normalises);
        ``stats`` has ``ntokens`` (all languages), ``nsentences``, per-language ``loss_<lang>``,
        ``nll_<lang>``, ``ntokens_<lang>`` (floats/ints, sums over the batch) and ``waitk``.
    """
    with autocast_context(batch.fbank.device, precision):
        out = model(batch.fbank, batch.fbank_lengths, batch.prev_output_tokens, waitk=waitk)
        loss, stats = criterion(out, batch)
    stats = {k: (v.item() if torch.is_tensor(v) else v) for k, v in dict(stats).items()}
    stats.setdefault("ntokens", int(sum(batch.ntokens.values())))
    stats.setdefault("nsentences", batch.size)
    for lang, n in batch.ntokens.items():
        stats.setdefault(f"ntokens_{lang}", int(n))
    stats["waitk"] = waitk
    return loss.float(), stats


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """Global L2 norm of the gradients; clipped to ``max_norm`` when ``max_norm > 0``. Returns the norm
    BEFORE clipping (inf/nan when a gradient is non-finite; then nothing is clipped)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach().float()) for g in grads]))
    total = float(norm)
    if max_norm > 0 and math.isfinite(total) and total > max_norm:
        coef = max_norm / (total + 1e-6)
        for g in grads:
            g.mul_(coef)
    return total


def optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                   clip_norm: float, skip_if_nonfinite: bool = True) -> float:
    """Clip gradients, step the optimiser and the LR schedule, zero the gradients.

    Args:
        clip_norm: clip the global gradient L2 norm to this (0 = no clipping).
        skip_if_nonfinite: when the gradient norm is inf/nan, zero the gradients WITHOUT stepping
            (the caller sees a non-finite return value and counts a skipped update).

    Returns:
        The global gradient norm before clipping (float; non-finite => the step was skipped).
    """
    params = [p for g in optimizer.param_groups for p in g["params"]]
    gnorm = clip_grad_norm(params, clip_norm)
    if skip_if_nonfinite and not math.isfinite(gnorm):
        optimizer.zero_grad(set_to_none=True)
        return gnorm
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return gnorm


class StrategyError(RuntimeError):
    """An update strategy failed while training (a peer rank died or timed out, the process group
    could not be formed). The message is one line naming the rank and the operation;
    ``mmst-train`` prints it as ``mmst-train: error: ...`` and exits 1."""


@dataclass
class UpdateResult:
    """Outcome of one update.

    Attributes:
        stats: summed statistics of the micro-batches (``loss`` = summed loss, ``ntokens``,
            ``nsentences``, per-language ``loss_<lang>``/``nll_<lang>``/``ntokens_<lang>``, ``n_frames``).
        grad_norm: global gradient norm before clipping (nan when skipped before backward).
        skipped: True when the update was skipped because of a non-finite loss or gradient.
        batch_ids: utterance ids of all micro-batches (to name them in a NaN error).
        dist_stats: the distributed mode's own numbers of this update (e.g. DropCompute's drop rate);
            the trainer logs them per log interval: the mean, the maximum for keys ending in ``_max``,
            and for keys ending in ``_count`` the rate ``<name>_per_s`` (see
            :mod:`mmst.training.distributed`).
    """

    stats: dict[str, float] = field(default_factory=dict)
    grad_norm: float = float("nan")
    skipped: bool = False
    batch_ids: list[str] = field(default_factory=list)
    dist_stats: dict[str, float] = field(default_factory=dict)


def merge_stats(acc: dict[str, float], new: dict[str, Any]) -> None:
    """Add numeric entries of ``new`` into ``acc`` in place (non-numeric entries are ignored)."""
    for k, v in new.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            acc[k] = acc.get(k, 0.0) + float(v)
