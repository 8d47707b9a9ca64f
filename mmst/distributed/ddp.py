"""``--distributed ddp``: the synchronous baseline.

``torch.nn.parallel.DistributedDataParallel`` with gradient accumulation over ``M = --update-freq``
micro-batches: micro-batches 1..M-1 run under ``model.no_sync()`` (local accumulation only), the
backward of micro-batch M triggers DDP's bucketed all-reduce, which divides by N and sums. With the
caller's per-micro-batch ``scale`` (e.g. 1/M for mean losses) the gradient is the nominal
``1/(N*M) sum_n sum_m grad_nm``.

The step time is therefore ``max_n sum_m t_nm + T_comm`` (every rank waits for the slowest one), which
is what :mod:`mmst.distributed.straggler_model` predicts.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from mmst.distributed.common import LossFn, StepStats, as_scales, samples_of
from mmst.distributed.env import DistEnv, guard
from mmst.distributed.stragglers import StragglerInjector


class DDPStrategy:
    """Gradient-accumulating DDP step (see module docstring).

    Args:
        env: the :class:`~mmst.distributed.env.DistEnv`.
        injector: optional :class:`StragglerInjector` (its delay sleeps between forward and backward).
        find_unused_parameters: passed to DDP (needed when some parameters get no gradient, e.g. a
            language-specific decoder absent from a micro-batch).
    """

    name = "ddp"

    def __init__(self, env: DistEnv, injector: StragglerInjector | None = None,
                 find_unused_parameters: bool = False) -> None:
        self.env = env
        self.injector = injector or StragglerInjector()
        self.find_unused_parameters = find_unused_parameters

    def wrap(self, model: torch.nn.Module) -> DistributedDataParallel:
        """Wrap ``model`` (already on ``env.device``) in DDP; DDP broadcasts rank 0's parameters."""
        dev = self.env.device
        with guard("DDP construction (parameter broadcast)", self.env):
            return DistributedDataParallel(
                model, device_ids=[dev] if dev.type == "cuda" else None,
                find_unused_parameters=self.find_unused_parameters)

    def step(self, model: DistributedDataParallel, micro_batches: Sequence[Any], loss_fn: LossFn,
             scale: float | Sequence[float]) -> StepStats:
        """Forward/backward all micro-batches; on return ``p.grad`` holds the all-reduced gradient.

        Args:
            model: the DDP-wrapped model from :meth:`wrap`.
            micro_batches: the M micro-batches of this rank for this step.
            loss_fn: ``loss_fn(model, mb) -> (loss, stats)``.
            scale: multiplier(s) of each micro-batch loss before backward.

        Raises:
            DistributedError: the all-reduce failed (dead / hung peer) within ``--dist-timeout``.
        """
        clock = time.perf_counter
        n = len(micro_batches)
        scales = as_scales(scale, n)
        st = StepStats(n_micro=n, global_total=float(n * self.env.world_size))
        t_start = clock()
        for m, (mb, s) in enumerate(zip(micro_batches, scales)):
            last = m == n - 1
            t0 = clock()
            ctx = contextlib.nullcontext() if last else model.no_sync()
            with ctx:
                loss, stats = loss_fn(model, mb)
                fwd = clock() - t0
                st.delay_s += self.injector.delay(compute_estimate_s=3.0 * fwd)
                tb = clock()
                if last:
                    with guard(f"DDP gradient all-reduce (micro-batch {m + 1}/{n})", self.env):
                        (loss * s).backward()
                else:
                    (loss * s).backward()
                bwd = clock() - tb
            self.injector.observe_compute(fwd + bwd)
            st.micro_times_s.append(clock() - t0)
            st.loss_sum += float(loss.detach())
            st.n_samples += samples_of(stats)
            st.n_computed += 1
        st.step_time_s = clock() - t_start
        st.compute_s = st.step_time_s
        st.global_computed = st.global_total
        st.global_samples = st.n_samples * self.env.world_size
        return st
