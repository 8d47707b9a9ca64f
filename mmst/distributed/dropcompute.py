"""``--distributed dropcompute``: compute-threshold dropping (Giladi et al., "DropCompute: simple and
more robust distributed synchronous training via compute variance reduction", NeurIPS 2023,
arXiv:2306.10598).

Per step, each rank starts a clock. Before each micro-batch, and again between its forward and
backward, it compares the elapsed time with the threshold ``tau``; once past ``tau`` it skips the
remaining micro-batches (a micro-batch whose forward finished past ``tau`` is dropped without its
backward) and joins the gradient all-reduce. The normalisation is unchanged: every micro-batch is
scaled by the nominal factor (``1/(N*M)`` overall), so dropped micro-batches simply contribute zero
(paper Sec. 3, Alg. 1).

All-reduce and DDP. With DDP's ``no_sync`` accumulation the all-reduce is launched by the backward of
the LAST micro-batch; a rank that dropped it would never join, and the other ranks would hang. This
module therefore does not use the DDP wrapper: the model is a plain module whose parameters are
broadcast from rank 0 once, gradients accumulate locally, and after the micro-batch loop every rank -
whatever it dropped - performs exactly one all-reduce of one flattened bucket
``[grads / N, n_computed, n_samples, loss_sum, compute_s]``. The gradient part is computed exactly like
DDP's reducer (local accumulation, divide by N, SUM all-reduce), so with ``tau = inf`` the gradients are
bit-identical to :class:`~mmst.distributed.ddp.DDPStrategy` (tested in ``tests/test_distributed.py``).
The four extra numbers ride in the same message, so logging the global drop rate costs no extra
message. The only other communication is the one-off all-gather of ``--compute-threshold auto``.

``--compute-threshold auto``: the first ``S`` steps run with ``tau = inf`` and record each rank's
micro-batch times ``t_{n,s,m}`` and all-reduce times; after step ``S`` one all-gather shares them and
every rank computes the same ``tau`` with :func:`mmst.distributed.straggler_model.choose_tau`, which
maximises the paper's expected effective speed (Sec. 4.2, Eq. 5-6)::

    S_eff(tau) = E[ sum_n Mtilde_n(tau) ] / ( E[ min(tau, max_n T_n) ] + T_c ),
    Mtilde_n(tau) = #{ m : T_n^(m) <= tau },   T_n^(m) = sum_{i<=m} t_{n,i}

estimated by Monte-Carlo resampling of the recorded per-rank micro-batch times.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from mmst.distributed.common import LossFn, StepStats, as_scales, samples_of
from mmst.distributed.env import DistEnv, all_gather_tensor, all_reduce_sum_, broadcast_module_
from mmst.distributed.stragglers import StragglerInjector

N_EXTRA = 4  # n_computed, n_samples, loss_sum, compute_s appended to the gradient bucket


def parse_threshold(text: str | float | None) -> float | str:
    """``--compute-threshold``: ``auto``, ``inf``/None, or seconds (> 0). Raises ValueError otherwise."""
    if text is None:
        return math.inf
    if isinstance(text, str):
        if text.strip().lower() == "auto":
            return "auto"
        try:
            val = float(text)
        except ValueError as e:
            raise ValueError(f"--compute-threshold {text!r}: expected seconds, 'inf' or 'auto'") from e
    else:
        val = float(text)
    if not val > 0:
        raise ValueError(f"--compute-threshold {text!r}: must be > 0 seconds")
    return val


class DropComputeStrategy:
    """DropCompute step (see module docstring).

    Args:
        env: the :class:`~mmst.distributed.env.DistEnv`.
        threshold: ``tau`` in seconds, ``math.inf`` (never drop; = DDP), or ``"auto"``.
        auto_steps: S, steps recorded before choosing ``tau`` automatically.
        injector: optional straggler injector; its simulated compute is cut at the deadline.
        max_drop_rate: optional cap on the expected drop rate for ``auto`` (None = paper's pure argmax).
        seed: Monte-Carlo seed of ``auto`` (identical on all ranks, so all choose the same tau).
    """

    name = "dropcompute"

    def __init__(self, env: DistEnv, threshold: float | str = "auto", auto_steps: int = 10,
                 injector: StragglerInjector | None = None, max_drop_rate: float | None = None,
                 seed: int = 0) -> None:
        self.env = env
        thr = parse_threshold(threshold) if isinstance(threshold, str) else float(threshold)
        self.auto = thr == "auto"
        self.tau_s: float = math.inf if self.auto else float(thr)
        self.auto_steps = max(1, int(auto_steps))
        self.injector = injector or StragglerInjector()
        self.max_drop_rate = max_drop_rate
        self.seed = seed
        self._rec_micro: list[list[float]] = []
        self._rec_comm: list[float] = []
        self.tau_info: dict[str, float] = {}
        self._chosen = False

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Broadcast rank 0's parameters/buffers to all ranks; returns ``model`` itself (no DDP wrapper)."""
        broadcast_module_(model, self.env)
        return model

    def step(self, model: torch.nn.Module, micro_batches: Sequence[Any], loss_fn: LossFn,
             scale: float | Sequence[float]) -> StepStats:
        """Run up to M micro-batches within ``tau``, then all-reduce; ``p.grad`` holds the result.

        Raises:
            DistributedError: the all-reduce (or the one-off all-gather) failed within ``--dist-timeout``.
        """
        clock = time.perf_counter
        n = len(micro_batches)
        scales = as_scales(scale, n)
        st = StepStats(n_micro=n, tau_s=self.tau_s)
        t_start = clock()
        deadline = t_start + self.tau_s if math.isfinite(self.tau_s) else None
        for mb, s in zip(micro_batches, scales):
            t0 = clock()
            if deadline is not None and t0 >= deadline:
                break  # would start after tau: skip the rest
            loss, stats = loss_fn(model, mb)
            fwd = clock() - t0
            finished = self.injector.delay(compute_estimate_s=3.0 * fwd, deadline=deadline)
            if not finished or (deadline is not None and clock() >= deadline):
                st.micro_times_s.append(clock() - t0)
                break  # past tau between forward and backward: drop this one too
            tb = clock()
            (loss * s).backward()
            bwd = clock() - tb
            self.injector.observe_compute(fwd + bwd)
            st.micro_times_s.append(clock() - t0)
            st.loss_sum += float(loss.detach())
            st.n_samples += samples_of(stats)
            st.n_computed += 1
        st.compute_s = clock() - t_start
        t_comm = clock()
        extra = self._all_reduce_grads(model, st)
        st.comm_s = clock() - t_comm
        st.global_computed, st.global_samples = float(extra[0]), float(extra[1])
        st.global_total = float(n * self.env.world_size)
        st.step_time_s = clock() - t_start
        if self.auto and not self._chosen:
            self._record(st)
        return st

    def _all_reduce_grads(self, model: torch.nn.Module, st: StepStats) -> torch.Tensor:
        """One SUM all-reduce of ``[grad/N ..., n_computed, n_samples, loss_sum, compute_s]``; writes the
        averaged gradients back to ``p.grad`` and returns the 4 summed extras (float64)."""
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
        dtype = grads[0].dtype if grads else torch.float32
        flat = torch.cat([g.reshape(-1) for g in grads] + [torch.zeros(N_EXTRA, dtype=dtype, device=self.env.device)])
        ng = flat.numel() - N_EXTRA
        flat[:ng].div_(self.env.world_size)
        flat[ng:] = torch.tensor([st.n_computed, st.n_samples, st.loss_sum, st.compute_s], dtype=dtype)
        all_reduce_sum_(flat, self.env, "DropCompute gradient all-reduce")
        off = 0
        for g in grads:
            k = g.numel()
            g.copy_(flat[off:off + k].view_as(g))
            off += k
        return flat[ng:].double().cpu()

    def _record(self, st: StepStats) -> None:
        """Store this step's micro-batch/all-reduce times; after ``auto_steps`` steps choose ``tau``."""
        self._rec_micro.append(list(st.micro_times_s))
        self._rec_comm.append(st.comm_s)
        if len(self._rec_micro) < self.auto_steps:
            return
        from mmst.distributed.straggler_model import choose_tau

        m = max(len(r) for r in self._rec_micro)
        local = torch.tensor([r + [float("nan")] * (m - len(r)) for r in self._rec_micro] , dtype=torch.float64)
        payload = torch.cat([local.reshape(-1), torch.tensor(self._rec_comm, dtype=torch.float64)])
        gathered = all_gather_tensor(payload, self.env, "DropCompute auto-threshold all-gather")
        s = len(self._rec_micro)
        times = gathered[:, : s * m].reshape(self.env.world_size, s, m).numpy()
        comm = gathered[:, s * m:].numpy()  # (N, S)
        # pure communication ~ the all-reduce time of the rank that arrived last (it waited least)
        t_c = float(min(comm[int(times[:, i].sum(axis=1).argmax()), i] for i in range(s)))
        res = choose_tau(times, comm_s=t_c, max_drop_rate=self.max_drop_rate, seed=self.seed)
        self.tau_s = float(res["tau_s"])
        self._chosen = True
        self.tau_info = {k: float(v) for k, v in res.items()}
        self._rec_micro.clear()
        self._rec_comm.clear()
