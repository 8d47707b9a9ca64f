"""Types shared by the distributed modes: the step contract, the gradient normalisation and the
per-step statistics.

The modes work on ANY step of the form::

    loss_fn(model, micro_batch) -> (loss: scalar Tensor, stats: dict)

Gradient normalisation (exact, the same as one process over the computed micro-batches). Every rank
back-propagates each micro-batch's ``loss`` as returned (no per-rank scaling) and sums the weight of
the micro-batches it computed: ``stats[weight_key]`` (e.g. ``ntokens`` for a loss summed over target
tokens), or 1 per micro-batch when ``weight_key`` is None (a loss that is already a mean over
equal-sized micro-batches). The weights ride in the gradient all-reduce (the same bucket); every rank
then divides the summed gradient by the global weight::

    g = sum_n sum_{m computed on n} grad loss_nm  /  sum_n sum_{m computed on n} w_nm

So DDP over N ranks equals one process over all N*M micro-batches even when their token counts differ,
and a DropCompute step equals one process over the micro-batches that were computed: a dropped
micro-batch contributes neither gradient nor weight (Giladi et al., 2023, Sec. 3 divide by the nominal
N*M instead; that biases the step length by the drop rate). ``stats`` may contain ``nsamples`` (or
``nsentences``) to count samples; otherwise 1 sample per micro-batch is assumed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

LossFn = Callable[[torch.nn.Module, Any], tuple[torch.Tensor, dict[str, Any]]]


@dataclass
class StepStats:
    """Statistics of one synchronous step (times in seconds, wall clock ``time.perf_counter``).

    Attributes:
        step_time_s: from the start of the step to the end of the gradient all-reduce.
        compute_s: this rank's busy time (forward + injected delay + backward of computed micro-batches,
            plus the time lost on a dropped one) before it joined the all-reduce. DDP overlaps its
            all-reduce with the last backward, so there ``compute_s`` = ``step_time_s``.
        comm_s: time spent in (waiting for) the all-reduce on this rank.
        n_micro: nominal micro-batches per rank (M). n_computed: micro-batches whose gradient this rank
            contributed. global_computed / global_total: the same summed over ranks (DropCompute gets
            them for free inside the gradient all-reduce; DDP assumes nothing was dropped).
        tau_s: the DropCompute threshold used (inf for DDP / before ``auto`` has chosen).
        weight / global_weight: the normalising weight of this rank's computed micro-batches, and of all
            ranks' (the gradient's divisor, see the module docstring).
        loss_sum: sum of the micro-batch losses (as returned by ``loss_fn``) computed on this rank.
        n_samples: samples in this rank's computed micro-batches; global_samples: summed over ranks.
        micro_times_s: wall time of each micro-batch started on this rank (forward+delay+backward).
        delay_s: injected delay slept on this rank in this step (part of ``compute_s``).
        overshoot_s: DropCompute: how far this rank's compute ran past ``tau`` (0 when it finished
            before; a forward or backward in progress is never interrupted).
        overshoot_s_max: DropCompute: how far the slowest rank ran past ``tau``
            (``max(0, max_n compute_s_n - tau)``), the quantity Eq. 7 of
            :mod:`mmst.distributed.straggler_model` predicts.
        compute_s_per_rank / delay_s_per_rank: ``compute_s`` / ``delay_s`` of every rank (DropCompute:
            from the gradient all-reduce; empty where not known).
    """

    step_time_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    n_micro: int = 0
    n_computed: int = 0
    global_computed: float = 0.0
    global_total: float = 0.0
    tau_s: float = float("inf")
    weight: float = 0.0
    global_weight: float = 0.0
    loss_sum: float = 0.0
    n_samples: float = 0.0
    global_samples: float = 0.0
    micro_times_s: list[float] = field(default_factory=list)
    delay_s: float = 0.0
    overshoot_s: float = 0.0
    overshoot_s_max: float = 0.0
    compute_s_per_rank: list[float] = field(default_factory=list)
    delay_s_per_rank: list[float] = field(default_factory=list)

    @property
    def drop_rate(self) -> float:
        """Fraction of the N*M nominal micro-batches of this step that were dropped (all ranks)."""
        return 1.0 - self.global_computed / self.global_total if self.global_total else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (with ``drop_rate``; without the per-micro-batch list)."""
        d = asdict(self)
        d.pop("micro_times_s")
        d["drop_rate"] = self.drop_rate
        return d


def samples_of(stats: dict[str, Any]) -> float:
    """Number of samples in a micro-batch from its stats (``nsamples``, else ``nsentences``, else 1)."""
    for k in ("nsamples", "nsentences"):
        if k in stats:
            return float(stats[k])
    return 1.0


def weight_of(stats: dict[str, Any], weight_key: str | None) -> float:
    """The normalising weight of one micro-batch: ``stats[weight_key]``, or 1 when ``weight_key`` is None.

    Raises:
        KeyError: ``weight_key`` is not in ``stats`` (names the key and the keys there are).
    """
    if weight_key is None:
        return 1.0
    if weight_key not in stats:
        raise KeyError(f"normalising weight {weight_key!r} not in the micro-batch stats {sorted(stats)}")
    return float(stats[weight_key])


def normalise_(summed: torch.Tensor, global_weight: torch.Tensor) -> torch.Tensor:
    """Divide an all-reduced gradient sum by the all-reduced weight, in place (a zero weight, i.e. nothing
    computed anywhere, leaves the all-zero gradient as it is). ``global_weight`` is a 0-d or 1-element
    tensor of ``summed``'s dtype. Returns ``summed``."""
    if float(global_weight) > 0:
        summed.div_(global_weight)
    return summed


def as_scales(scale: float | Sequence[float], n: int) -> list[float]:
    """Broadcast one scale to ``n`` micro-batches, or check a per-micro-batch list has length ``n``.

    Raises:
        ValueError: a list of the wrong length.
    """
    if isinstance(scale, (int, float)):
        return [float(scale)] * n
    scales = [float(s) for s in scale]
    if len(scales) != n:
        raise ValueError(f"{len(scales)} scales for {n} micro-batches")
    return scales
