"""``--distributed ddp``: the synchronous baseline.

``torch.nn.parallel.DistributedDataParallel`` with gradient accumulation over ``M = --update-freq``
micro-batches: micro-batches 1..M-1 run under ``model.no_sync()`` (local accumulation only), the
backward of micro-batch M triggers DDP's bucketed all-reduce. Gradients are normalised exactly (see
:mod:`mmst.distributed.common`): a DDP communication hook appends this rank's weight (e.g. its target
tokens) to every gradient bucket, SUM-all-reduces the bucket and divides its gradient part by the
summed weight, so the result is ``sum_n sum_m grad loss_nm / sum_n sum_m w_nm``, the gradient of one
process over all ``N x M`` micro-batches, whatever their lengths. (DDP's own hook divides by N after
each rank divided by its own weight, which is exact only when every rank has the same weight.)

The step time is therefore ``max_n sum_m t_nm + T_comm`` (every rank waits for the slowest one), which
is what :mod:`mmst.distributed.straggler_model` predicts.

The last micro-batch's ``backward()`` returns only once the all-reduce has finished, so it includes the wait
for the slowest rank. The compute time fed to the straggler injector's running mean
(:meth:`~mmst.distributed.stragglers.StragglerInjector.observe_compute`) stops where the backward's compute
ends: when the communication hook receives the last gradient bucket. So an injected delay proportional to
compute (``straggler_fraction``) does not grow with this rank's own waiting, as in DropCompute and the
parameter server, whose all-reduce or push comes after the compute.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from mmst.distributed.common import LossFn, StepStats, normalise_, samples_of, weight_of
from mmst.distributed.env import DistEnv, guard
from mmst.distributed.stragglers import StragglerInjector


class _WeightState:
    """The hook's state: this rank's weight of the current step, the global weight it received, and when (on
    ``clock``, seconds) the last gradient bucket reached the hook (the end of the backward's compute)."""

    def __init__(self, clock=None) -> None:
        self.weight = 0.0
        self.global_weight = 0.0
        self.clock = clock
        self.t_ready: float | None = None


def _weighted_sum_hook(state: _WeightState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: all-reduce ``[bucket gradients, this rank's weight]`` (SUM) and return the
    gradients divided by the global weight (:func:`~mmst.distributed.common.normalise_`)."""
    if state.clock is not None:
        state.t_ready = state.clock()  # this bucket's gradients are computed; the wait for other ranks starts here
    buf = bucket.buffer()
    flat = torch.cat([buf, torch.tensor([state.weight], dtype=buf.dtype, device=buf.device)])
    fut = dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True).get_future()

    def done(f: torch.futures.Future) -> torch.Tensor:
        out = f.value()[0]
        state.global_weight = float(out[-1])
        return normalise_(out[:-1], out[-1])

    return fut.then(done)


# DDP checks the hook's annotations as objects; ``from __future__ import annotations`` made them strings
_weighted_sum_hook.__annotations__ = {"state": _WeightState, "bucket": dist.GradBucket,
                                      "return": torch.futures.Future[torch.Tensor]}


class DDPStrategy:
    """Gradient-accumulating DDP step (see module docstring).

    Args:
        env: the :class:`~mmst.distributed.env.DistEnv`.
        injector: optional :class:`StragglerInjector` (its delay sleeps between forward and backward).
        find_unused_parameters: passed to DDP (needed when some parameters get no gradient, e.g. a
            language-specific decoder absent from a micro-batch).
        weight_key: the key of a micro-batch's ``stats`` holding its normalising weight (e.g. ``ntokens``);
            None = 1 per micro-batch (see :mod:`mmst.distributed.common`).
    """

    name = "ddp"

    def __init__(self, env: DistEnv, injector: StragglerInjector | None = None,
                 find_unused_parameters: bool = False, weight_key: str | None = None) -> None:
        self.env = env
        self.injector = injector or StragglerInjector()
        self.find_unused_parameters = find_unused_parameters
        self.weight_key = weight_key
        self._hook_state = _WeightState(self.injector.clock)

    def wrap(self, model: torch.nn.Module) -> DistributedDataParallel:
        """Wrap ``model`` (already on ``env.device``) in DDP with the weighted-sum communication hook; DDP
        broadcasts rank 0's parameters."""
        dev = self.env.device
        with guard("DDP construction (parameter broadcast)", self.env):
            ddp = DistributedDataParallel(
                model, device_ids=[dev] if dev.type == "cuda" else None,
                find_unused_parameters=self.find_unused_parameters)
        ddp.register_comm_hook(self._hook_state, _weighted_sum_hook)
        return ddp

    def step(self, model: DistributedDataParallel, micro_batches: Sequence[Any], loss_fn: LossFn) -> StepStats:
        """Forward/backward all micro-batches; on return ``p.grad`` holds the all-reduced gradient divided by
        the global weight (module docstring).

        Args:
            model: the DDP-wrapped model from :meth:`wrap`.
            micro_batches: the M micro-batches of this rank for this step.
            loss_fn: ``loss_fn(model, mb) -> (loss, stats)``; ``loss`` is back-propagated as it is.

        Raises:
            DistributedError: the all-reduce failed (dead / hung peer) within ``--dist-timeout``.
        """
        clock = self.injector.clock
        n = len(micro_batches)
        st = StepStats(n_micro=n, global_total=float(n * self.env.world_size))
        t_start = clock()
        for m, mb in enumerate(micro_batches):
            last = m == n - 1
            t0 = clock()
            ctx = contextlib.nullcontext() if last else model.no_sync()
            with ctx:
                loss, stats = loss_fn(model, mb)
                st.weight += weight_of(stats, self.weight_key)
                self._hook_state.weight = st.weight  # read by the hook during the last backward
                fwd = clock() - t0
                st.delay_s += self.injector.delay(compute_estimate_s=3.0 * fwd)
                tb = clock()
                if last:
                    self._hook_state.t_ready = None
                    with guard(f"DDP gradient all-reduce (micro-batch {m + 1}/{n})", self.env):
                        loss.backward()
                else:
                    loss.backward()
                bwd = clock() - tb
            # pure compute: the last backward's wait for the slowest rank (after the last bucket) left out
            t_ready = self._hook_state.t_ready if last else None
            self.injector.observe_compute(fwd + (bwd if t_ready is None else max(0.0, t_ready - tb)))
            st.micro_times_s.append(clock() - t0)
            st.loss_sum += float(loss.detach())
            st.n_samples += samples_of(stats)
            st.n_computed += 1
        st.step_time_s = clock() - t_start
        st.compute_s = st.step_time_s
        st.global_computed = st.global_total
        st.global_samples = st.n_samples * self.env.world_size
        st.global_weight = self._hook_state.global_weight
        return st
