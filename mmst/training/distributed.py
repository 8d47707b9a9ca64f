"""``mmst-train --distributed ddp|dropcompute|param-server``: the trainer's adapters over :mod:`mmst.distributed`.

The trainer (:mod:`mmst.training.strategy`) calls, per update,
``strategy.run_update(model, criterion, optimizer, scheduler, micro_batches, waitks, clip_norm)``, and
``strategy.setup(trainer)`` once. These adapters run the modes of this package on the shared step
(:func:`mmst.training.step.compute_loss` / :func:`~mmst.training.step.optimizer_step`):

* loss normalisation (exact, see :mod:`mmst.distributed.common`): each rank back-propagates its summed
  micro-batch losses; its target-token count rides in the gradient all-reduce, and the summed gradient
  is divided by the global token count of the micro-batches computed. So DDP equals the single process
  over the same ``N x M`` micro-batches, and a DropCompute step equals the single process over the
  micro-batches computed. DropCompute's logged ``loss`` / ``ntokens`` / ``nll_loss`` count only those
  (a micro-batch dropped between its forward and its backward is not counted).
* data sharding: ``setup`` restricts the trainer's ``EpochBatchIterator`` to every N-th batch
  (``batches[rank::N]``, truncated to a common length) of the same seeded epoch order, and multi-k
  training draws a rank's ``j``-th micro-batch's wait-k at update-wide index ``j N + rank``
  (:class:`mmst.training.loop.WaitkSampler`), as one process would for the same micro-batches.
* only the main process (rank 0; the server in ``param-server`` mode) validates, logs and writes
  checkpoints (``is_main_process``).
* one update consumes the same nominal number of micro-batches in every mode, ``W x M`` (``W`` = data
  ranks, ``M = optim.update_freq``), so ``optim.max_update``, the LR schedule and the validation and
  checkpoint intervals mean the same amount of data in every mode:

  - ``ddp`` / ``dropcompute``: ``W = N`` ranks; one update = one synchronous step (DropCompute's
    dropped micro-batches count as consumed: they are drawn and skipped, as in the paper);
  - ``param-server``: rank 0 is the server, ``W = N - 1`` workers; one update = ``W`` applied pushes of
    ``M`` micro-batches each (the optimizer steps once per push, the LR schedule once per update).
    ``lr_per_push`` sets the learning rate of a push: ``per_worker`` (default) ``lr / W``, so one update
    of ``W`` pushes moves the parameters about as far as one synchronous update (Adam's step is about
    ``lr`` whatever the gradient's scale, so ``full`` would take ``W`` full steps per update and confound
    per-update comparisons with DDP); ``full`` every push at ``lr`` (plain asynchronous SGD, Dean et al.
    2012); ``staleness`` ``lr / max(1, staleness)`` (Zhang et al., IJCAI 2016; ``staleness_lr: true`` is
    an alias).

Per update the adapters return their mode's numbers in ``UpdateResult.dist_stats``; the trainer logs
them per log interval (means; ``*_max`` keys as maxima; ``*_count`` keys as rates ``*_per_s``):

* ``ddp``: ``ddp_step_s`` (+ ``_max``), ``ddp_delay_s`` (injected delay of rank 0);
* ``dropcompute``: ``dc_drop_rate``, ``dc_tau_s`` (-1 = no threshold: while ``auto`` records, or when it found none
  that pays), ``dc_compute_s`` (mean over
  ranks, + ``_max`` over ranks), ``dc_delay_s`` (mean over ranks), ``dc_step_s`` (+ ``_max``),
  ``dc_overshoot_s`` (rank 0 past tau), ``dc_overshoot_s_slowest`` (the slowest rank past tau, what Eq. 7
  predicts); once, when ``auto`` chooses tau, a ``tau_info`` event (tau, the model's predicted drop rate,
  speed-up over synchronous training, step times, ``T_c``, ``phi``; :func:`~mmst.distributed.straggler_model.choose_tau`)
  in ``train_log.jsonl`` and on the console;
* ``param-server``: ``ps_staleness`` (+ ``_max``), ``ps_pushes_per_s``, ``ps_live_workers``, ``ps_lr_scale``
  (mean learning-rate factor of the pushes applied); the server's ``loss``, ``nll_loss``, ``ntokens``,
  ``nsentences`` and ``frames_per_s`` are those of the pushes it applied (sent with each push).

``param-server`` in detail:

* the server (rank 0) runs inside the normal training loop: each ``run_update`` applies the next ``W``
  pushes (:meth:`mmst.distributed.param_server.ParamServer.run_pushes`), so it validates, logs and
  writes atomic best/last checkpoints on the usual schedule and resumes from ``checkpoint_last.pt``
  like any run. While it validates, workers wait for their reply (keep validation shorter than
  ``--dist-timeout``). At the end :meth:`TrainerParamServer.finish` stops the workers.
* workers (ranks >= 1) run a heartbeat thread from their first pull, compute one gradient per
  ``run_update`` on their shard (``W`` shards), clip it, push it and load the returned parameters; they
  stop when the server says so (``training_done``). Their data position on resume is that of an average
  worker (the server's checkpointed iterator advances ``M`` batches per update).
* ``max_staleness`` (SSP bound ``s``) defaults to ``W``; ``max_staleness=inf`` turns the bound off.
* ``worker_timeout`` (s, default ``max(2, dist_timeout / 2)``): a worker without heartbeat for that long
  is declared lost, logged (console and a ``worker_lost`` event in ``train_log.jsonl``), and training
  goes on with the others; one that was only late comes back (a ``worker_back`` event). Under
  ``torchrun`` a dead rank makes the agent stop every rank; with ``--max-restarts`` the job restarts
  from ``checkpoint_last.pt``.

Options (keyword arguments of the factories; ``mmst-train`` forwards them from its config / flags):
``dist_timeout`` (s), ``backend``, ``compute_threshold`` (s | ``auto`` | ``inf``), ``auto_steps``,
``auto_warmup_steps`` (updates run before the ``auto_steps`` recorded ones, default 5), ``max_drop_rate``, ``max_staleness``, ``lr_per_push`` (``full`` | ``per_worker`` | ``staleness``),
``staleness_lr`` (true = ``lr_per_push: staleness``), ``worker_timeout`` (s), ``straggler_delay``,
``straggler_fraction``, ``straggler_base_ms``, ``slow_rank``, ``seed``, ``find_unused_parameters``, and
for fault-tolerance tests ``fail_at_update`` / ``fail_rank`` (that rank exits with status 13 when it
starts that update, on the first attempt only under ``torchrun``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from typing import Any

import torch

from mmst.distributed.ddp import DDPStrategy
from mmst.distributed.dropcompute import AUTO_WARMUP_STEPS, DropComputeStrategy, parse_threshold
from mmst.distributed.env import DEFAULT_TIMEOUT_S, init_distributed
from mmst.distributed.param_server import LR_PER_PUSH, ParamServer, ParamWorker, flat_grads
from mmst.distributed.stragglers import StragglerInjector, parse_delay_spec, parse_slow_rank
from mmst.training.step import UpdateResult, clip_grad_norm, compute_loss, merge_stats, optimizer_step

log = logging.getLogger("mmst.train")

_KNOWN = {"dist_timeout", "backend", "compute_threshold", "auto_steps", "auto_warmup_steps", "max_drop_rate", "max_staleness",
          "staleness_lr", "lr_per_push", "worker_timeout", "straggler_delay", "straggler_fraction", "straggler_base_ms",
          "slow_rank", "seed", "find_unused_parameters", "fail_at_update", "fail_rank"}


def _result(stats: dict[str, float], gnorm: float, ids: list[str], dist_stats: dict[str, float]) -> UpdateResult:
    return UpdateResult(stats=stats, grad_norm=gnorm, skipped=not math.isfinite(gnorm), batch_ids=ids,
                        dist_stats=dist_stats)


#: ``lr_per_push`` of ``mmst-train``'s parameter server when none is given (module docstring: the same
#: step length per update as a synchronous mode).
DEFAULT_LR_PER_PUSH = "per_worker"


def resolve_lr_per_push(lr_per_push: Any = None, staleness_lr: Any = None) -> str:
    """The parameter server's ``lr_per_push`` from the options ``lr_per_push`` and its alias ``staleness_lr``
    (true = ``staleness``); :data:`DEFAULT_LR_PER_PUSH` when neither is given.

    Raises:
        ValueError: an unknown value, or ``staleness_lr: true`` with another ``lr_per_push``.
    """
    if lr_per_push is not None and str(lr_per_push) not in LR_PER_PUSH:
        raise ValueError(f"distributed.options.lr_per_push={lr_per_push!r}: expected one of {list(LR_PER_PUSH)}")
    if staleness_lr not in (None, True, False):
        raise ValueError(f"distributed.options.staleness_lr={staleness_lr!r}: expected true or false")
    if staleness_lr:
        if lr_per_push not in (None, "staleness"):
            raise ValueError(f"distributed.options.staleness_lr=true means lr_per_push=staleness, but "
                             f"lr_per_push={lr_per_push!r} is also given")
        return "staleness"
    return str(lr_per_push) if lr_per_push is not None else DEFAULT_LR_PER_PUSH


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

    def _maybe_fail(self, update: int) -> None:
        """Fault injection for tests (options ``fail_at_update``, ``fail_rank``): exit with status 13."""
        at = self.opts.get("fail_at_update")
        if at is None or self.env.rank != int(self.opts.get("fail_rank", 1)) or update != int(at):
            return
        if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
            return  # a restarted attempt runs through
        log.error("rank %d: injected failure at update %d (fail_at_update)", self.env.rank, update)
        logging.shutdown()
        sys.stderr.flush()
        os._exit(13)

    @staticmethod
    def _shard(trainer: Any, rank: int, world: int) -> None:
        waitk = getattr(trainer, "waitk", None)
        if waitk is not None:  # a rank's micro-batch draws the wait-k one process draws for it
            waitk.data_rank, waitk.data_ranks = rank, max(1, world)
        it = getattr(trainer, "train_iter", None)
        if it is None or world <= 1 or getattr(it, "_mmst_sharded", False):
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
        self._follow_model_device(trainer)
        self._shard(trainer, self.env.rank, self.env.world_size)

    def _follow_model_device(self, trainer: Any) -> None:
        """Put the communication buffers where the model is: with gloo the group's default device is the
        CPU, but a model on a GPU (several gloo ranks sharing one GPU; NCCL refuses two ranks on one
        device) needs its gradients all-reduced from that GPU."""
        p = next(iter(trainer.model.parameters()), None)
        if p is not None and p.device != self.env.device:
            log.info("rank %d: %s process group, model on %s: buffers on %s", self.env.rank, self.env.backend,
                     p.device, p.device)
            self.env.device = p.device

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

    def _update_index(self) -> int:
        return int(self.trainer.state.num_updates) if self.trainer is not None else 0


class TrainerDDP(_Base):
    """``--distributed ddp`` for the MMST trainer (DDP + no_sync accumulation)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.core = DDPStrategy(self.env, self.injector, bool(options.get("find_unused_parameters", True)),
                                weight_key="ntokens")
        self._wrapped: Any = None

    def setup(self, trainer: Any) -> None:
        """Shard the data and wrap ``trainer.model`` in DDP (the trainer keeps the unwrapped module)."""
        super().setup(trainer)
        self._wrapped = self.core.wrap(trainer.model)

    def _run(self, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
             micro_batches: list[Any], waitks: list[int | None], clip_norm: float) -> UpdateResult:
        self._maybe_fail(self._update_index())
        wrapped = self._wrapped if self._wrapped is not None else self.core.wrap(model)
        self._wrapped = wrapped
        collected: list[dict[str, Any]] = []
        model.train()
        self.last_step = self.core.step(wrapped, list(zip(micro_batches, waitks)), self._loss_fn(criterion, collected))
        stats: dict[str, float] = {}
        for st in collected[:self.last_step.n_computed]:  # the micro-batches whose gradient was used
            merge_stats(stats, st)
        gnorm = optimizer_step(model, optimizer, scheduler, clip_norm)
        return _result(stats, gnorm, [i for b in micro_batches for i in b.ids], {})

    def run_update(self, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
                   micro_batches: list[Any], waitks: list[int | None], clip_norm: float) -> UpdateResult:
        """One synchronous update (see module docstring); ``dist_stats``: ``ddp_step_s``, ``ddp_delay_s``."""
        res = self._run(model, criterion, optimizer, scheduler, micro_batches, waitks, clip_norm)
        st = self.last_step
        res.dist_stats = {"ddp_step_s": st.step_time_s, "ddp_step_s_max": st.step_time_s, "ddp_delay_s": st.delay_s}
        return res


class TrainerDropCompute(TrainerDDP):
    """``--distributed dropcompute`` for the MMST trainer; adds the ``dc_*`` numbers (module docstring)."""

    def __init__(self, **options: Any) -> None:
        _Base.__init__(self, **options)
        thr = parse_threshold(options.get("compute_threshold", "auto"))
        mdr = options.get("max_drop_rate")
        self.core = DropComputeStrategy(self.env, thr, int(options.get("auto_steps") or 10), self.injector,
                                        float(mdr) if mdr is not None else None, int(options.get("seed") or 0),
                                        weight_key="ntokens",
                                        auto_warmup_steps=int(options.get("auto_warmup_steps", AUTO_WARMUP_STEPS)))
        self._wrapped = None
        self._tau_logged = False

    def run_update(self, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
                   micro_batches: list[Any], waitks: list[int | None], clip_norm: float) -> UpdateResult:
        """One DropCompute update; ``dist_stats`` has the ``dc_*`` numbers of the module docstring."""
        res = self._run(model, criterion, optimizer, scheduler, micro_batches, waitks, clip_norm)
        st = self.last_step
        comp = st.compute_s_per_rank or [st.compute_s]
        delay = st.delay_s_per_rank or [st.delay_s]
        res.dist_stats = {
            "dc_drop_rate": st.drop_rate, "dc_tau_s": st.tau_s if math.isfinite(st.tau_s) else -1.0,
            "dc_compute_s": sum(comp) / len(comp), "dc_compute_s_max": max(comp),
            "dc_delay_s": sum(delay) / len(delay), "dc_step_s": st.step_time_s, "dc_step_s_max": st.step_time_s,
            "dc_overshoot_s": st.overshoot_s, "dc_overshoot_s_slowest": st.overshoot_s_max}
        if self.core.tau_info and not self._tau_logged:
            self._log_tau_info()
        return res

    def _log_tau_info(self) -> None:
        """Once, when ``auto`` has chosen tau: a ``tau_info`` event at the update that chose it (tau applies
        from the next one; the model's predictions, Eq. 4-7 of :mod:`mmst.distributed.straggler_model`) and a
        console line."""
        self._tau_logged = True
        info = dict(self.core.tau_info)
        u = self._update_index() + 1
        if self.trainer is not None and self.is_main_process:
            self.trainer.log.log("event", u, {"tau_info": info})
        log.info("DropCompute auto threshold after update %d: tau %.4gs, predicted drop rate %.3f, predicted "
                 "speed-up over synchronous training %.3f (step %.4gs vs %.4gs; T_c %.4gs, phi %.2f)", u,
                 info.get("tau_s", math.inf), info.get("drop_rate", 0.0), info.get("speedup", 1.0),
                 info.get("step_s", 0.0), info.get("sync_step_s", 0.0), info.get("comm_s", 0.0),
                 info.get("fwd_fraction", 0.0))


class TrainerParamServer(_Base):
    """``--distributed param-server`` for the MMST trainer (rank 0 = server; see module docstring).

    Raises:
        ValueError: fewer than 2 processes, a bad ``max_staleness`` or ``lr_per_push``.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.n_workers = self.env.world_size - 1
        if self.n_workers < 1:
            raise ValueError("--distributed param-server needs at least 2 processes (rank 0 = server, ranks >= 1 "
                             "= workers); start it with torchrun --nproc-per-node N (N >= 2)")
        ms = options.get("max_staleness")
        if ms is None:
            self.max_staleness: int | None = self.n_workers
        elif str(ms).strip().lower() in ("inf", "none"):
            self.max_staleness = None
        else:
            self.max_staleness = int(ms)
            if self.max_staleness < 0:
                raise ValueError(f"max_staleness={ms!r}: must be >= 0 (or inf for no bound)")
        self.lr_per_push = resolve_lr_per_push(options.get("lr_per_push"), options.get("staleness_lr"))
        self.server: ParamServer | None = None
        self.worker: ParamWorker | None = None
        self._version = 0
        self._stopped = False
        self._n_lost_logged = self._n_back_logged = 0

    @property
    def needs_batches(self) -> bool:
        """The server reads no training data (the trainer skips drawing batches for it)."""
        return self.env.rank != 0

    def training_done(self) -> bool | None:
        """Workers train until the server stops them (True then); the server counts updates itself (None)."""
        return None if self.env.rank == 0 else self._stopped

    def setup(self, trainer: Any) -> None:
        """Keep the trainer; shard the data: worker r reads shard r-1 of W, the server keeps the position
        of shard 0 (advanced ``M`` batches per update) for resume."""
        self.trainer = trainer
        self._follow_model_device(trainer)
        self._shard(trainer, max(0, self.env.rank - 1), self.n_workers)
        if self.env.rank != 0:
            self.worker = ParamWorker(self.env, trainer.model, self.injector, self._heartbeat_s())
            self.worker.start_heartbeat()
            self._pulled = False

    def _heartbeat_s(self) -> float:
        """Heartbeat interval: a fifth of ``worker_timeout`` (at most 0.5 s), so a late beat is not a death."""
        wt = self.opts.get("worker_timeout")
        return min(0.5, float(wt) / 5.0) if wt else 0.5

    def _server(self) -> ParamServer:
        if self.server is None:
            tr = self.trainer
            budget = max(0, int(tr.cfg.optim.max_update) - int(tr.state.num_updates)) * self.n_workers
            self.server = ParamServer(self.env, tr.model, tr.optimizer, budget, self.max_staleness,
                                      worker_timeout_s=self.opts.get("worker_timeout"), lr_per_push=self.lr_per_push)
            log.info("param-server: %d workers, %d pushes to go (%d updates of %d pushes), max_staleness %s, "
                     "lr_per_push %s, worker_timeout %.1fs", self.n_workers, budget, budget // self.n_workers,
                     self.n_workers, self.max_staleness, self.lr_per_push, self.server.worker_timeout_s)
        return self.server

    def run_update(self, model: torch.nn.Module, criterion: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
                   micro_batches: list[Any], waitks: list[int | None], clip_norm: float) -> UpdateResult:
        """Server: apply the next ``W`` pushes, then step the LR schedule. Worker: compute, clip and push one
        gradient of ``M`` micro-batches, load the returned parameters.

        Raises:
            DistributedError: server: every worker lost; worker: the server died or hung.
        """
        if self.trainer is None:
            raise RuntimeError("param-server: setup(trainer) was not called")
        self._maybe_fail(self._update_index())
        if self.env.rank == 0:
            return self._server_update(scheduler)
        return self._worker_update(model, criterion, micro_batches, waitks, clip_norm)

    def _server_update(self, scheduler: Any) -> UpdateResult:
        srv = self._server()
        i0, s0, l0, n0 = len(srv.staleness), srv.samples, srv.loss_sum, srv.ntokens
        nll0, f0 = srv.nll_sum, srv.n_frames
        n = srv.run_pushes(self.n_workers)
        if scheduler is not None:
            scheduler.step()
        self.trainer.train_iter.skip(self.trainer.cfg.optim.update_freq)
        u = int(self.trainer.state.num_updates) + 1
        for w in srv.lost[self._n_lost_logged:]:
            self.trainer.log.log("event", u, {"worker_lost": w, "at_push": srv.lost_at.get(w),
                                              "live_workers": len(srv.alive)})
        for w in srv.rejoined[self._n_back_logged:]:
            self.trainer.log.log("event", u, {"worker_back": w, "live_workers": len(srv.alive)})
        self._n_lost_logged, self._n_back_logged = len(srv.lost), len(srv.rejoined)
        stale = srv.staleness[i0:] or [0]
        gn = srv.grad_norms[i0:] or [0.0]
        scales = srv.lr_scales[i0:] or [0.0]
        stats = {"loss": srv.loss_sum - l0, "ntokens": srv.ntokens - n0, "nsentences": srv.samples - s0,
                 "nll_loss": srv.nll_sum - nll0, "n_frames": srv.n_frames - f0}
        dist = {"ps_staleness": sum(stale) / len(stale), "ps_staleness_max": float(max(stale)),
                "ps_pushes_count": float(n), "ps_live_workers": float(len(srv.alive)),
                "ps_lr_scale": sum(scales) / len(scales)}
        return _result(stats, sum(gn) / len(gn), [], dist)

    def _worker_update(self, model: torch.nn.Module, criterion: Any, micro_batches: list[Any],
                       waitks: list[int | None], clip_norm: float) -> UpdateResult:
        if self.worker is None:
            self.worker = ParamWorker(self.env, model, self.injector, self._heartbeat_s())
            self._pulled = False
        if not self._pulled:
            self._pulled = True
            self._version, self._stopped = self.worker.start()
        if self._stopped:
            self.worker.close()
            return _result({}, 0.0, [], {})
        collected: list[dict[str, Any]] = []
        fn = self._loss_fn(criterion, collected)
        scale = 1.0 / max(1, sum(int(b.total_ntokens) for b in micro_batches))
        model.train()
        clock = time.perf_counter
        for item in zip(micro_batches, waitks):
            t0 = clock()
            loss, _ = fn(model, item)
            fwd = clock() - t0
            self.injector.delay(compute_estimate_s=3.0 * fwd)
            t1 = clock()
            (loss * scale).backward()
            self.injector.observe_compute(fwd + clock() - t1)
        params = [p for p in model.parameters() if p.requires_grad]
        gnorm = clip_grad_norm(params, clip_norm)
        ids = [i for b in micro_batches for i in b.ids]
        stats: dict[str, float] = {}
        for st in collected:
            merge_stats(stats, st)
        if not math.isfinite(gnorm):  # nothing pushed; the trainer counts a skipped update
            model.zero_grad(set_to_none=True)
            return _result(stats, gnorm, ids, {})
        g = flat_grads(model)
        model.zero_grad(set_to_none=True)
        self._version, self._stopped = self.worker.push(self._version, g, float(stats.get("nsentences", 0)),
                                                        float(stats.get("loss", 0.0)), float(stats.get("ntokens", 0)),
                                                        gnorm, float(stats.get("nll_loss", 0.0)),
                                                        float(stats.get("n_frames", 0)))
        if self._stopped:
            self.worker.close()
        return _result(stats, gnorm, ids, {})

    def finish(self) -> None:
        """After the last update: the server stops every worker and waits for their goodbyes (bounded)."""
        if self.env.rank == 0 and self.trainer is not None:
            stats = self._server().finish()
            log.info("param-server: %d pushes applied, staleness mean %.2f max %d, lost workers %s",
                     stats["updates"], stats["staleness_mean"], stats["staleness_max"], stats["lost_workers"])
        elif self.worker is not None:
            self.worker.close(say_bye=self._stopped)
