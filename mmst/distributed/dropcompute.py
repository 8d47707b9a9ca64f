"""``--distributed dropcompute``: compute-threshold dropping (Giladi et al., "DropCompute: simple and
more robust distributed synchronous training via compute variance reduction", NeurIPS 2023,
arXiv:2306.10598).

Per step, each rank starts a clock. Before each micro-batch, and again between its forward and
backward, it compares the elapsed time with the threshold ``tau``; once past ``tau`` it skips the
remaining micro-batches (a micro-batch whose forward finished past ``tau`` is dropped without its
backward) and joins the gradient all-reduce. These are the only check points: a forward or backward
in progress is never interrupted (nor is an injected delay, which is split between the two phases like
the compute it simulates, see :mod:`mmst.distributed.stragglers`), so a
rank can pass ``tau`` by up to one forward or backward; ``StepStats.overshoot_s`` (this rank) and
``StepStats.overshoot_s_max`` (the slowest rank) measure it and :mod:`mmst.distributed.straggler_model`
(Eq. 7) predicts the latter. Normalisation: the summed gradient is divided by the global weight of the
micro-batches actually computed (:mod:`mmst.distributed.common`), so a step equals one process over the
computed micro-batches; a dropped one contributes neither gradient nor weight. (The paper, Sec. 3 and
Alg. 1, keeps the nominal ``1/(N*M)``, which shortens a step by the drop rate.)

All-reduce and DDP. With DDP's ``no_sync`` accumulation the all-reduce is launched by the backward of
the LAST micro-batch; a rank that dropped it would never join, and the other ranks would hang. This
module therefore does not use the DDP wrapper: the model is a plain module whose parameters are
broadcast from rank 0 once, gradients accumulate locally, and after the micro-batch loop every rank -
whatever it dropped - performs exactly one all-reduce of one flattened bucket
``[grads, weight, n_computed, n_samples, loss_sum, compute_s, compute_s of rank 0..N-1, delay_s of rank
0..N-1]`` (each rank writes its own two slots, zeros elsewhere, so the SUM gives every rank's time), and
divides the gradient part by the summed weight. The gradient part is computed exactly like
:class:`~mmst.distributed.ddp.DDPStrategy`'s hook (local accumulation, SUM all-reduce with the weight,
divide by the global weight), so with ``tau = inf`` the gradients are bit-identical to DDP's (tested in
``tests/test_distributed.py``).
The extra numbers ride in the same message, so logging the global drop rate and every rank's compute
time costs no extra message. The only other communication is the one-off all-gather of ``--compute-threshold auto``.

``--compute-threshold auto``: after a warm-up of ``auto_warmup_steps`` steps (default
:data:`AUTO_WARMUP_STEPS` = 5, as the paper's reference code, which records from step 6 on:
``MIN_DROP_STEP = 5`` in its ``deepspeed-bert/run_pretraining.py``; first steps are slow: allocation,
caches, thread pools), the next ``S`` steps run with ``tau = inf`` and record each rank's
micro-batch times ``t_{n,s,m}``, the share of each spent before the forward/backward check, and the
all-reduce times; after step ``S`` one all-gather shares them and every rank computes the same ``tau``
with :func:`mmst.distributed.straggler_model.choose_tau`, which maximises the expected effective speed
(paper Sec. 4.2, Eq. 5-6, with the check points above: Eq. 4-7 of the model module), estimated by
Monte-Carlo resampling of the recorded per-rank micro-batch times. ``T_c`` is the median over the
recorded steps of the last-arriving rank's all-reduce time
(:func:`~mmst.distributed.straggler_model.estimate_comm_s`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from mmst.distributed.common import LossFn, StepStats, normalise_, samples_of, weight_of
from mmst.distributed.env import DistEnv, all_gather_tensor, all_reduce_sum_, broadcast_module_
from mmst.distributed.stragglers import StragglerInjector

#: steps of ``--compute-threshold auto`` run with tau = inf and NOT recorded before the ``S`` recorded ones
AUTO_WARMUP_STEPS = 5
N_SUMS = 5  # weight, n_computed, n_samples, loss_sum, compute_s appended to the gradient bucket (then 2N per-rank slots)


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
        auto_warmup_steps: steps before those S, run with ``tau = inf`` and not recorded (default
            :data:`AUTO_WARMUP_STEPS`).
        injector: optional straggler injector; its delays are whole (never cut at the deadline).
        max_drop_rate: optional cap on the expected drop rate for ``auto`` (None = paper's pure argmax).
        seed: Monte-Carlo seed of ``auto`` (identical on all ranks, so all choose the same tau).
        weight_key: the key of a micro-batch's ``stats`` holding its normalising weight (e.g. ``ntokens``);
            None = 1 per micro-batch (see :mod:`mmst.distributed.common`).
    """

    name = "dropcompute"

    def __init__(self, env: DistEnv, threshold: float | str = "auto", auto_steps: int = 10,
                 injector: StragglerInjector | None = None, max_drop_rate: float | None = None,
                 seed: int = 0, weight_key: str | None = None, auto_warmup_steps: int = AUTO_WARMUP_STEPS) -> None:
        self.env = env
        self.weight_key = weight_key
        thr = parse_threshold(threshold) if isinstance(threshold, str) else float(threshold)
        self.auto = thr == "auto"
        self.tau_s: float = math.inf if self.auto else float(thr)
        self.auto_steps = max(1, int(auto_steps))
        if int(auto_warmup_steps) < 0:
            raise ValueError(f"auto_warmup_steps must be >= 0, got {auto_warmup_steps}")
        self.auto_warmup_steps = int(auto_warmup_steps)
        self._auto_seen = 0  # steps run while tau is still to be chosen
        self.injector = injector or StragglerInjector()
        self.max_drop_rate = max_drop_rate
        self.seed = seed
        self._rec_micro: list[list[float]] = []
        self._rec_comm: list[float] = []
        self.tau_info: dict[str, float] = {}
        self._chosen = False
        self._fwd_share = 0.5  # share of a micro-batch's time before check 2 (measured; straggler model's phi)
        self._compute_fwd_share = 1.0 / 3.0  # forward / (forward + backward) of the pure compute (EMA)
        self._rec_fwd: list[float] = []

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Broadcast rank 0's parameters/buffers to all ranks; returns ``model`` itself (no DDP wrapper)."""
        broadcast_module_(model, self.env)
        return model

    def step(self, model: torch.nn.Module, micro_batches: Sequence[Any], loss_fn: LossFn) -> StepStats:
        """Run up to M micro-batches within ``tau``, then all-reduce; ``p.grad`` holds the summed gradient of
        the computed micro-batches divided by their global weight. The computed micro-batches are the first
        ``StepStats.n_computed`` of ``micro_batches`` (a micro-batch dropped between its forward and its
        backward is not counted anywhere).

        Raises:
            DistributedError: the all-reduce (or the one-off all-gather) failed within ``--dist-timeout``.
        """
        clock = self.injector.clock
        n = len(micro_batches)
        st = StepStats(n_micro=n, tau_s=self.tau_s)
        t_start = clock()
        deadline = t_start + self.tau_s if math.isfinite(self.tau_s) else None
        fwd_phase = 0.0
        for mb in micro_batches:
            t0 = clock()
            if deadline is not None and t0 >= deadline:
                break  # check 1: would start after tau, skip the rest
            loss, stats = loss_fn(model, mb)
            fwd = clock() - t0
            # a simulated slow-down stretches both phases: the forward's share of the compute now
            delay = self.injector.sample_delay(compute_estimate_s=3.0 * fwd)
            st.delay_s += self.injector.sleep(delay * self._compute_fwd_share)
            t_mid = clock()
            if deadline is not None and t_mid >= deadline:
                st.micro_times_s.append(t_mid - t0)
                break  # check 2: past tau between forward and backward, drop this one too
            fwd_phase += t_mid - t0
            tb = clock()
            loss.backward()
            bwd = clock() - tb
            st.delay_s += self.injector.sleep(delay * (1.0 - self._compute_fwd_share))  # ... and the backward's
            self.injector.observe_compute(fwd + bwd)
            self._compute_fwd_share = 0.9 * self._compute_fwd_share + 0.1 * fwd / max(fwd + bwd, 1e-12)
            st.micro_times_s.append(clock() - t0)
            st.loss_sum += float(loss.detach())
            st.n_samples += samples_of(stats)
            st.weight += weight_of(stats, self.weight_key)
            st.n_computed += 1
        st.compute_s = clock() - t_start
        if math.isfinite(self.tau_s):
            st.overshoot_s = max(0.0, st.compute_s - self.tau_s)
        done = sum(st.micro_times_s[:st.n_computed])
        self._fwd_share = (fwd_phase / done) if done > 0 else self._fwd_share
        t_comm = clock()
        extra = self._all_reduce_grads(model, st)
        st.comm_s = clock() - t_comm
        st.global_weight, st.global_computed, st.global_samples = float(extra[0]), float(extra[1]), float(extra[2])
        w = self.env.world_size
        st.compute_s_per_rank = extra[N_SUMS:N_SUMS + w].tolist()
        if math.isfinite(self.tau_s):
            st.overshoot_s_max = max(0.0, max(st.compute_s_per_rank) - self.tau_s)
        st.delay_s_per_rank = extra[N_SUMS + w:N_SUMS + 2 * w].tolist()
        st.global_total = float(n * w)
        st.step_time_s = clock() - t_start
        if self.auto and not self._chosen:
            self._auto_seen += 1
            if self._auto_seen > self.auto_warmup_steps:  # warm-up steps are run, not recorded
                self._record(st)
        return st

    def _all_reduce_grads(self, model: torch.nn.Module, st: StepStats) -> torch.Tensor:
        """One SUM all-reduce of ``[grad ..., weight, n_computed, n_samples, loss_sum, compute_s, per-rank
        compute_s (N slots), per-rank delay_s (N slots)]``; writes the gradients divided by the global weight
        back to ``p.grad`` and returns the summed extras (float64, ``N_SUMS + 2N`` values)."""
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
        dtype = grads[0].dtype if grads else torch.float32
        w = self.env.world_size
        extras = torch.zeros(N_SUMS + 2 * w, dtype=torch.float64)
        extras[:N_SUMS] = torch.tensor([st.weight, st.n_computed, st.n_samples, st.loss_sum, st.compute_s],
                                       dtype=torch.float64)
        extras[N_SUMS + self.env.rank] = st.compute_s
        extras[N_SUMS + w + self.env.rank] = st.delay_s
        flat = torch.cat([g.reshape(-1) for g in grads] + [extras.to(dtype=dtype, device=self.env.device)])
        ng = flat.numel() - extras.numel()
        all_reduce_sum_(flat, self.env, "DropCompute gradient all-reduce")
        normalise_(flat[:ng], flat[ng:ng + 1])
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
        self._rec_fwd.append(self._fwd_share)
        if len(self._rec_micro) < self.auto_steps:
            return
        from mmst.distributed.straggler_model import choose_tau, estimate_comm_s

        m = max(len(r) for r in self._rec_micro)
        local = torch.tensor([r + [float("nan")] * (m - len(r)) for r in self._rec_micro], dtype=torch.float64)
        payload = torch.cat([local.reshape(-1), torch.tensor(self._rec_comm, dtype=torch.float64),
                             torch.tensor(self._rec_fwd, dtype=torch.float64)])
        gathered = all_gather_tensor(payload, self.env, "DropCompute auto-threshold all-gather")
        s = len(self._rec_micro)
        times = gathered[:, : s * m].reshape(self.env.world_size, s, m).numpy()
        comm = gathered[:, s * m:s * m + s].numpy()  # (N, S)
        phi = float(gathered[:, s * m + s:].mean())
        t_c = estimate_comm_s(times, comm)
        res = choose_tau(times, comm_s=t_c, max_drop_rate=self.max_drop_rate, seed=self.seed, fwd_fraction=phi)
        res["comm_s"], res["fwd_fraction"] = t_c, phi
        self.tau_s = float(res["tau_s"])
        self._chosen = True
        self.tau_info = {k: float(v) for k, v in res.items()}
        self._rec_micro.clear()
        self._rec_comm.clear()
        self._rec_fwd.clear()
