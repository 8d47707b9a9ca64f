"""``--distributed param-server``: asynchronous parameter server on plain c10d send/recv.

Rank 0 (server) holds the parameters and the optimiser; ranks 1..W are workers. Protocol (one message
each way per update; float32 tensors of fixed size, so the server can post a receive before knowing the
sender)::

    worker -> server   [type, version, n_samples, loss_sum, ntokens, grad_norm, nll_sum, n_frames,
                        grad (P values)]
                       type: 0 PULL, 1 PUSH, 2 BYE
                       (BYE after the stop reply: lets the server's receiver thread finish cleanly)
    server -> worker   [version, stop, params (P values)]

* The server posts ``irecv`` WITHOUT a source (receive from any source; ``work._source_rank()`` names
  the sender) and applies every pushed gradient on arrival: ``optimizer.step()`` once per push, version
  += 1. Staleness of a push = server version at arrival - version the worker used. The learning rate
  of that step (``lr_per_push``): ``full`` the optimiser's lr (plain asynchronous SGD, Dean et al.,
  NIPS 2012); ``per_worker`` lr / W, so W pushes (one round of every worker) move the parameters about
  as far as one synchronous update; ``staleness`` lr / ``max(1, staleness)`` (Zhang et al.,
  "Staleness-aware async-SGD", IJCAI 2016; ``staleness_lr=True`` is the same).
* ``max_staleness = s`` (SSP, Ho et al., NIPS 2013): each worker's clock = number of its applied pushes;
  a worker whose clock is more than ``s`` ahead of the slowest live worker does not get its reply (and
  therefore waits) until the slowest catches up. So no live worker falls more than ``s`` updates of its
  own behind the fastest, and the staleness of any push is bounded by about ``s * (W - 1) + W``.
* Worker death does not stop training: workers write a heartbeat to the c10d store every
  ``heartbeat_s`` from a thread started before their first message (:meth:`ParamWorker.start`); a
  worker whose heartbeat is older than ``worker_timeout_s`` (or whose reply fails to send) is declared
  dead, logged, removed from the SSP minimum, and the server carries on with the rest. A worker never
  heard of is given ``--dist-timeout`` to start up. A worker lost for a late heartbeat (a loaded machine,
  not a death) is readmitted as soon as its heartbeat is fresh again or a message of it arrives. (Under torchrun's agent a dead process ends the
  whole job anyway; see :mod:`mmst.training.distributed`.)
  Receives run in a helper thread feeding a queue, so the main thread keeps checking liveness while a
  receive is pending (gloo cannot poll a receive or give it a short timeout: a timed-out gloo op closes
  its connections).
* Training ends after ``total_updates`` applied pushes: each worker gets ``stop=1`` in its next reply.
* Two ways to drive the server: :meth:`ParamServer.serve` runs to the end in one call (the stand-alone
  runner); :meth:`ParamServer.run_pushes` applies the next ``n`` pushes and returns, so a caller can
  validate, log and checkpoint between calls (``mmst-train``), and :meth:`ParamServer.finish` stops the
  workers.
* Workers never talk to each other; no ``torch.distributed.rpc``.

Kept by the server: every push's staleness and gradient norm, samples, summed loss and target tokens,
lost workers and when; :meth:`ParamServer.stats` summarises them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from mmst.distributed.common import LossFn, as_scales, samples_of
from mmst.distributed.env import DistEnv, DistributedError, guard
from mmst.distributed.stragglers import StragglerInjector

log = logging.getLogger("mmst.distributed.param_server")

PULL, PUSH, BYE = 0, 1, 2
HDR, REPLY_HDR = 8, 2
#: ``lr_per_push`` values: the learning rate of one applied push (module docstring).
LR_PER_PUSH = ("full", "per_worker", "staleness")


def lr_factor(lr_per_push: str, staleness: int, n_workers: int) -> float:
    """The factor on the optimiser's learning rate for one push (module docstring): 1 (``full``),
    ``1 / n_workers`` (``per_worker``), ``1 / max(1, staleness)`` (``staleness``).

    Raises:
        ValueError: an unknown ``lr_per_push``.
    """
    if lr_per_push == "full":
        return 1.0
    if lr_per_push == "per_worker":
        return 1.0 / max(1, n_workers)
    if lr_per_push == "staleness":
        return 1.0 / max(1, staleness)
    raise ValueError(f"lr_per_push={lr_per_push!r}: expected one of {LR_PER_PUSH}")


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """All trainable parameters concatenated into one float32 CPU vector."""
    return torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters() if p.requires_grad])


def load_flat_params_(model: torch.nn.Module, flat: torch.Tensor) -> None:
    """Copy ``flat`` (from :func:`flat_params`) back into the trainable parameters."""
    off = 0
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                k = p.numel()
                p.copy_(flat[off:off + k].view_as(p))
                off += k


def flat_grads(model: torch.nn.Module) -> torch.Tensor:
    """Gradients of the trainable parameters as one float32 CPU vector (zeros where ``grad`` is None)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).float().cpu()
                      for p in model.parameters() if p.requires_grad])


def _store() -> Any:
    from torch.distributed import distributed_c10d as c10d

    return c10d._get_default_store()


class ParamServer:
    """The server loop on rank 0 (see module docstring).

    Args:
        env: DistEnv (rank 0). model: the model holding the parameters (updated in place).
        optimizer: optimiser over ``model``'s parameters; ``lr_scheduler`` optional (stepped per update).
        total_updates: stop after this many applied pushes.
        max_staleness: SSP bound ``s`` (None = fully asynchronous).
        staleness_lr: divide the lr of a step by ``max(1, staleness)`` (the same as
            ``lr_per_push="staleness"``).
        worker_timeout_s: heartbeat age after which a worker is declared dead (default ``env.timeout_s/2``).
        on_update: ``callback(server)`` after every applied update (e.g. evaluation, logging).
        lr_per_push: ``full`` | ``per_worker`` | ``staleness`` (module docstring); default ``staleness``
            when ``staleness_lr`` else ``full``.

    Raises:
        ValueError: not rank 0, fewer than 2 processes, an unknown ``lr_per_push``, or ``staleness_lr``
            with another ``lr_per_push``.
    """

    def __init__(self, env: DistEnv, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 total_updates: int, max_staleness: int | None = None, staleness_lr: bool = False,
                 worker_timeout_s: float | None = None, lr_scheduler: Any = None,
                 on_update: Callable[[ParamServer], None] | None = None, lr_per_push: str | None = None) -> None:
        if lr_per_push is None:
            lr_per_push = "staleness" if staleness_lr else "full"
        if lr_per_push not in LR_PER_PUSH:
            raise ValueError(f"lr_per_push={lr_per_push!r}: expected one of {LR_PER_PUSH}")
        if staleness_lr and lr_per_push != "staleness":
            raise ValueError(f"staleness_lr=True contradicts lr_per_push={lr_per_push!r} (it means 'staleness')")
        if env.rank != 0:
            raise ValueError("ParamServer runs on rank 0")
        if env.world_size < 2:
            raise ValueError("param-server mode needs at least 2 processes (1 server + 1 worker)")
        self.env, self.model, self.optimizer = env, model, optimizer
        self.total_updates = int(total_updates)
        self.max_staleness = max_staleness
        self.lr_per_push = lr_per_push
        self.worker_timeout_s = worker_timeout_s if worker_timeout_s is not None else max(2.0, env.timeout_s / 2)
        self.lr_scheduler = lr_scheduler
        self.on_update = on_update
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.n_params = sum(p.numel() for p in self.params)
        self.version = 0
        self.workers = list(range(1, env.world_size))
        self.clock = dict.fromkeys(self.workers, 0)
        self.alive = set(self.workers)
        self.stopped: set[int] = set()
        self.pending: set[int] = set()
        self.lost: list[int] = []
        self.lost_at: dict[int, int] = {}
        self._byes: set[int] = set()
        self._suspect: set[int] = set()  # lost for a late heartbeat: readmitted if it shows up again
        self._lost_waiting: set[int] = set()  # lost while waiting for an (SSP-held) reply
        self.rejoined: list[int] = []
        self._rx_byes: set[int] = set()  # BYEs taken off the wire by the receiver thread
        self.staleness: list[int] = []
        self.samples = 0.0
        self.loss_sum = 0.0
        self.ntokens = 0.0
        self.nll_sum = 0.0
        self.n_frames = 0.0
        self.grad_norms: list[float] = []
        self.lr_scales: list[float] = []
        self.t_start = 0.0
        self.elapsed_s = 0.0
        self._last_check = 0.0  # perf_counter of the last liveness check
        self._grace_until = float("-inf")  # no worker is declared lost before this (after the server's stall)
        self._lock = threading.RLock()
        self._done = threading.Event()

    # -- liveness -------------------------------------------------------------------------------
    def _heartbeat_age(self, w: int) -> float:
        key = f"mmst_ps/hb/{w}"
        try:
            store = _store()
            if store.check([key]):  # never ``get`` a missing key: that blocks for the store timeout
                return time.time() - float(store.get(key).decode())
        except Exception:  # noqa: BLE001 - store gone
            pass
        # never heard of: still starting up (loading data, building the model); lost only after --dist-timeout
        return 0.0 if time.perf_counter() - self.t_start < max(self.worker_timeout_s, self.env.timeout_s) else float("inf")

    def _declare_dead(self, w: int, why: str, may_return: bool = False) -> None:
        with self._lock:
            if w not in self.alive:
                return
            self.alive.discard(w)
            if w in self.pending:
                self.pending.discard(w)
                self._lost_waiting.add(w)
            if may_return:
                self._suspect.add(w)
            self.lost.append(w)
            self.lost_at[w] = self.version
            log.warning("param-server: worker %d lost (%s) after %d applied pushes; continuing with %d worker(s)",
                        w, why, self.version, len(self.alive))
            self._release_pending()

    def _readmit(self, w: int, why: str) -> None:
        """A worker declared lost for a late heartbeat shows it is alive (a fresh heartbeat or a message):
        it takes part again, and a reply it was waiting for is sent (its push was applied or is pending)."""
        with self._lock:
            self._suspect.discard(w)
            self.alive.add(w)
            self.rejoined.append(w)
            log.warning("param-server: worker %d is back (%s) after %d applied pushes; %d worker(s)",
                        w, why, self.version, len(self.alive))
            if w in self._lost_waiting:
                self._lost_waiting.discard(w)
                self.pending.add(w)
            self._release_pending()

    def _liveness_tick(self, now: float) -> None:
        """Check liveness when due (every ``min(0.5, worker_timeout_s / 4)`` s of ``time.perf_counter``).

        A heartbeat's age only says a worker is dead if the server was watching meanwhile. When the server
        itself did not run for longer than ``worker_timeout_s`` (the whole machine stalled, or the server was
        busy elsewhere), every heartbeat looks old for the same reason, so no worker is declared lost until
        each has had a fresh ``worker_timeout_s`` from the server's resumption; readmission still runs.
        """
        gap = now - self._last_check
        if gap <= min(0.5, self.worker_timeout_s / 4):
            return
        if gap > self.worker_timeout_s:
            self._grace_until = now + self.worker_timeout_s
            log.warning("param-server: the server did not run for %.1fs (> worker_timeout %.1fs); heartbeats are "
                        "judged again from now on", gap, self.worker_timeout_s)
        self._check_liveness(judge_dead=now >= self._grace_until)
        self._last_check = now

    def _check_liveness(self, judge_dead: bool = True) -> None:
        """Declare lost each live worker whose heartbeat is older than ``worker_timeout_s`` (unless
        ``judge_dead`` is false: a grace after the server's own stall), and readmit each suspect whose
        heartbeat is fresh again."""
        for w in sorted(self.alive - self.stopped) if judge_dead else []:
            if self._heartbeat_age(w) > self.worker_timeout_s:
                self._declare_dead(w, f"no heartbeat for > {self.worker_timeout_s:.1f}s", may_return=True)
        for w in sorted(self._suspect):
            if self._heartbeat_age(w) <= self.worker_timeout_s:
                self._readmit(w, "its heartbeat is fresh again: it was late, not dead")

    def _receiver(self) -> None:
        """Receiver thread: post an any-source ``irecv``, wait, queue ``(src, buffer)``; repeat.

        A thread is used because a gloo receive cannot be polled or given a short timeout; the main
        thread waits on the queue with a timeout instead, so it can check liveness and stop even while a
        receive from a worker that just died is pending (the thread is then abandoned; it is a daemon).
        """
        group = self._group  # bound once: never post on a LATER process group of the same process
        while not self._done.is_set() and not self._all_byes_received():
            buf = torch.empty(HDR + self.n_params)
            try:
                work = dist.irecv(buf, group=group)  # no src: receive from any worker
                work.wait()
            except Exception as e:  # noqa: BLE001 - handed to the main thread (ignored once done)
                self._inbox.put((None, e))
                return
            src = int(work._source_rank())
            if int(buf[0]) == BYE:
                with self._lock:
                    self._rx_byes.add(src)
            self._inbox.put((src, buf))

    def _all_byes_received(self) -> bool:
        """True once every live worker has been told to stop and its BYE has been received: no message is
        left to come, so the receiver thread must not post another receive. (A gloo send blocks until it
        is matched, so a BYE left unreceived would hang its worker until the timeout.)"""
        with self._lock:
            return not (self.alive - self.stopped) and (self.alive & self.stopped) <= self._rx_byes

    # -- messaging ------------------------------------------------------------------------------
    def _reply(self, w: int, stop: bool) -> None:
        with self._lock:
            msg = torch.empty(REPLY_HDR + self.n_params)
            msg[0], msg[1] = float(self.version), float(stop)
            msg[REPLY_HDR:] = flat_params(self.model)
            try:
                with guard(f"param-server reply to worker {w}", self.env):
                    dist.send(msg, dst=w)
            except DistributedError as e:
                self._declare_dead(w, f"send failed: {e}")
                return
            if stop:
                self.stopped.add(w)

    def _ssp_blocked(self, w: int) -> bool:
        if self.max_staleness is None:
            return False
        live = [self.clock[v] for v in self.alive - self.stopped]
        return bool(live) and self.clock[w] - min(live) > self.max_staleness

    def _release_pending(self) -> None:
        for w in sorted(self.pending):
            if self.version >= self.total_updates:
                self.pending.discard(w)
                self._reply(w, stop=True)
            elif not self._ssp_blocked(w):
                self.pending.discard(w)
                self._reply(w, stop=False)

    def _apply(self, src: int, buf: torch.Tensor) -> None:
        used = int(buf[1])
        stale = self.version - used
        self.staleness.append(stale)
        self.samples += float(buf[2])
        self.loss_sum += float(buf[3])
        self.ntokens += float(buf[4])
        self.grad_norms.append(float(buf[5]))
        self.nll_sum += float(buf[6])
        self.n_frames += float(buf[7])
        g = buf[HDR:]
        off = 0
        for p in self.params:
            k = p.numel()
            p.grad = g[off:off + k].view_as(p).to(device=p.device, dtype=p.dtype).clone()
            off += k
        saved = [grp["lr"] for grp in self.optimizer.param_groups]
        factor = lr_factor(self.lr_per_push, stale, len(self.workers))
        self.lr_scales.append(factor)
        if factor != 1.0:
            for grp in self.optimizer.param_groups:
                grp["lr"] = grp["lr"] * factor
        self.optimizer.step()
        for grp, lr in zip(self.optimizer.param_groups, saved):
            grp["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        self.version += 1
        self.clock[src] += 1

    def start(self) -> None:
        """Start the clock and the receiver thread (once); :meth:`run_pushes` calls it when needed."""
        if getattr(self, "_started", False):
            return
        self._started = True
        self.t_start = time.perf_counter()
        self._last_check = self.t_start
        self._inbox: queue.Queue = queue.Queue()
        self._group = dist.distributed_c10d._get_default_group()
        threading.Thread(target=self._receiver, name="ps-receiver", daemon=True).start()

    def _live_unstopped(self) -> bool:
        with self._lock:
            return bool(self.alive - self.stopped)

    def _loop(self, until: Callable[[], bool]) -> None:
        """Handle messages (apply pushes, reply, check liveness) until ``until()`` or no live worker is left
        unstopped. Raises DistributedError when a receive fails while training is still on."""
        try:
            while not until() and self._live_unstopped():
                self._liveness_tick(time.perf_counter())
                try:
                    src, buf = self._inbox.get(timeout=0.05)
                except queue.Empty:
                    continue
                if src is None:
                    with self._lock:
                        if not (self.alive - self.stopped) or self.version >= self.total_updates:
                            return
                    with guard(f"param-server receive (after {self.version} applied pushes)", self.env):
                        raise buf
                self._handle(src, buf)
        except BaseException:
            self._done.set()
            raise
        finally:
            self.elapsed_s = time.perf_counter() - self.t_start

    def _handle(self, src: int, buf: torch.Tensor) -> None:
        with self._lock:
            if src in self._suspect:
                self._readmit(src, "a message arrived: it was late, not dead")
            if src not in self.alive:
                return
            typ = int(buf[0])
            if typ == BYE:
                if src in self.stopped:
                    self._byes.add(src)  # normal goodbye after its stop reply
                else:
                    self._declare_dead(src, "worker left early (BYE)")
                return
            if typ == PUSH and self.version < self.total_updates:
                self._apply(src, buf)
                if self.on_update is not None:
                    self.on_update(self)
            if self.version >= self.total_updates:
                self._reply(src, stop=True)
            elif self._ssp_blocked(src):
                self.pending.add(src)
            else:
                self._reply(src, stop=False)
            self._release_pending()

    def run_pushes(self, n: int) -> int:
        """Apply the next ``n`` pushed gradients (fewer when ``total_updates`` is reached), serving every
        message meanwhile. Used by ``mmst-train``, which counts one update per ``W`` pushes.

        Returns:
            The number of pushes applied.

        Raises:
            DistributedError: every worker was lost (or a receive failed) before ``n`` pushes arrived.
        """
        self.start()
        v0 = self.version
        target = min(self.total_updates, v0 + int(n))
        self._loop(lambda: self.version >= target)
        if self.version < target:
            raise DistributedError(
                f"[rank 0/{self.env.world_size}] param-server: no live worker left after {self.version} applied "
                f"pushes (lost workers {self.lost}; worker_timeout {self.worker_timeout_s:.1f}s)")
        return self.version - v0

    def finish(self) -> dict[str, Any]:
        """End training now: every live worker gets ``stop`` in its next reply (pushes arriving from now on
        are not applied); wait for their goodbyes. Returns :meth:`stats`."""
        self.start()
        with self._lock:
            self.total_updates = min(self.total_updates, self.version)
            self._release_pending()
        self._loop(lambda: False)
        # the receiver thread goes on until every stopped worker's BYE is in (or a receive fails)
        self._collect_byes()
        self._done.set()
        return self.stats()

    def serve(self) -> dict[str, Any]:
        """Run until ``total_updates`` pushes are applied and every live worker is stopped.

        Returns:
            stats: ``updates``, ``elapsed_s``, ``updates_per_s``, ``samples``, ``samples_per_s``,
            ``staleness_mean``, ``staleness_max``, ``lost_workers``, ``lost_at_update`` (worker -> version).

        Raises:
            DistributedError: a receive failed (e.g. every worker died before finishing) within the timeout.
        """
        self.start()
        self._loop(lambda: self.version >= self.total_updates)
        return self.finish()

    def _collect_byes(self, timeout_s: float = 5.0) -> None:
        """After the loop: wait (bounded) for the BYE of every stopped live worker, so the receiver thread
        finishes its last receive and exits before the process group is destroyed."""
        need = (self.alive & self.stopped) - self._byes
        deadline = time.perf_counter() + min(timeout_s, self.worker_timeout_s)
        while need and time.perf_counter() < deadline:
            try:
                src, buf = self._inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if src is None:
                return
            if int(buf[0]) == BYE:
                need.discard(src)

    def stats(self) -> dict[str, Any]:
        """Summary statistics (see :meth:`serve`)."""
        el = max(self.elapsed_s or (time.perf_counter() - self.t_start), 1e-9)
        st = self.staleness or [0]
        return {"updates": self.version, "elapsed_s": el, "updates_per_s": self.version / el,
                "samples": self.samples, "samples_per_s": self.samples / el,
                "staleness_mean": sum(st) / len(st), "staleness_max": max(st), "lost_workers": list(self.lost),
                "rejoined_workers": list(self.rejoined),
                "lost_at_update": dict(self.lost_at),
                "loss_mean": self.loss_sum / max(self.samples, 1.0)}


class ParamWorker:
    """A worker (rank >= 1): pull parameters, compute gradients on its shard, push them.

    Args:
        env: DistEnv. model: local replica (overwritten by each pull). injector: optional straggler delays.
        heartbeat_s: interval of the liveness heartbeat written to the c10d store.
    """

    def __init__(self, env: DistEnv, model: torch.nn.Module, injector: StragglerInjector | None = None,
                 heartbeat_s: float = 0.5) -> None:
        self.env, self.model = env, model
        self.injector = injector or StragglerInjector()
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.n_params = sum(p.numel() for p in self.params)
        self.heartbeat_s = heartbeat_s
        self._stop_hb = threading.Event()
        self._hb: threading.Thread | None = None
        self._said_bye = False
        self.steps = 0

    def _heartbeat(self) -> None:
        store = _store()
        key = f"mmst_ps/hb/{self.env.rank}"
        while True:
            try:
                store.set(key, repr(time.time()))
            except Exception:  # noqa: BLE001 - store gone: the job is ending
                return
            if self._stop_hb.wait(self.heartbeat_s):
                return

    def _exchange(self, typ: int, version: int, n_samples: float, loss_sum: float, ntokens: float,
                  grad: torch.Tensor | None, grad_norm: float = 0.0, nll_sum: float = 0.0,
                  n_frames: float = 0.0) -> tuple[int, bool]:
        msg = torch.zeros(HDR + self.n_params)
        msg[:HDR] = torch.tensor([float(typ), float(version), n_samples, loss_sum, ntokens, grad_norm, nll_sum,
                                  n_frames])
        if grad is not None:
            msg[HDR:] = grad
        reply = torch.empty(REPLY_HDR + self.n_params)
        what = "pull" if typ == PULL else f"push {self.steps}"
        with guard(f"param-server exchange (worker {self.env.rank}, {what}, after {self.steps - (typ == PUSH)} "
                   f"pushes, parameter version {version})", self.env):
            dist.send(msg, dst=0)
            dist.recv(reply, src=0)
        load_flat_params_(self.model, reply[REPLY_HDR:])
        return int(reply[0]), bool(reply[1] > 0.5)

    def start_heartbeat(self) -> None:
        """Start the heartbeat thread (once): the server declares a worker lost when it stops."""
        if self._hb is None:
            self._hb = threading.Thread(target=self._heartbeat, name="ps-heartbeat", daemon=True)
            self._hb.start()

    def start(self) -> tuple[int, bool]:
        """Start the heartbeat thread (if not yet) and pull the current parameters into the model.

        Returns:
            ``(version, stop)`` of the server's reply.

        Raises:
            DistributedError: the server is dead or hung (within ``--dist-timeout``).
        """
        self.start_heartbeat()
        return self._exchange(PULL, 0, 0.0, 0.0, 0.0, None)

    def push(self, version: int, grad: torch.Tensor, n_samples: float, loss_sum: float,
             ntokens: float = 0.0, grad_norm: float = 0.0, nll_sum: float = 0.0,
             n_frames: float = 0.0) -> tuple[int, bool]:
        """Push one gradient computed at parameter ``version`` and load the parameters of the reply.

        Args:
            version: the server version the gradient was computed at (for its staleness).
            grad: flat float32 gradient (:func:`flat_grads`), already normalised and clipped.
            n_samples / loss_sum / ntokens / grad_norm / nll_sum / n_frames: the samples, summed loss, target
                tokens, gradient norm (before clipping), summed NLL and input frames behind it (logged by the
                server).

        Returns:
            ``(version, stop)``: the new parameter version, and whether training is over.

        Raises:
            DistributedError: the server is dead or hung; the message names this worker and its push count.
        """
        self.steps += 1
        return self._exchange(PUSH, version, n_samples, loss_sum, ntokens, grad, grad_norm, nll_sum, n_frames)

    def close(self, say_bye: bool = True) -> None:
        """Send BYE (after a stop reply) once, and stop the heartbeat thread. Never raises."""
        if say_bye and not self._said_bye:
            self._said_bye = True
            self.bye()
        self._stop_hb.set()

    def bye(self) -> None:
        """Tell the server this worker leaves (after its stop reply); errors are ignored."""
        msg = torch.zeros(HDR + self.n_params)
        msg[0] = float(BYE)
        try:
            dist.send(msg, dst=0)
        except Exception:  # noqa: BLE001 - the server may already be gone
            log.debug("param-server: BYE not delivered")

    def run(self, batches: Callable[[int], Sequence[Any]], loss_fn: LossFn,
            scale: float | Sequence[float] | Callable[[Sequence[Any]], float | Sequence[float]],
            max_steps: int | None = None, before_step: Callable[[int], None] | None = None) -> dict[str, Any]:
        """Loop until the server says stop.

        Args:
            batches: ``batches(step) -> micro-batches`` for this worker's shard.
            loss_fn: ``loss_fn(model, mb) -> (loss, stats)``.
            scale: per-micro-batch loss multiplier(s), or a function of the micro-batches giving them.
            max_steps: safety cap on local steps (None = until stopped).
            before_step: hook called with the local step index (used for fault injection in tests).

        Returns:
            ``{"steps", "samples", "elapsed_s"}`` of this worker.

        Raises:
            DistributedError: the server died / hung (within ``--dist-timeout``).
        """
        clock = time.perf_counter
        t0 = clock()
        samples = 0.0
        stop = False
        try:
            version, stop = self.start()
            while not stop and (max_steps is None or self.steps < max_steps):
                if before_step is not None:
                    before_step(self.steps)
                mbs = batches(self.steps)
                sc = as_scales(scale(mbs) if callable(scale) else scale, len(mbs))
                loss_sum, n_s = 0.0, 0.0
                for mb, s in zip(mbs, sc):
                    ta = clock()
                    loss, stats = loss_fn(self.model, mb)
                    self.injector.delay(compute_estimate_s=3.0 * (clock() - ta))
                    fwd = clock() - ta
                    tb = clock()
                    (loss * s).backward()
                    self.injector.observe_compute(fwd + clock() - tb - self.injector.last_delay_s)
                    loss_sum += float(loss.detach())
                    n_s += samples_of(stats)
                g = flat_grads(self.model)
                for p in self.params:
                    p.grad = None
                samples += n_s
                version, stop = self.push(version, g, n_s, loss_sum)
        finally:
            self.close(say_bye=stop)
        return {"steps": self.steps, "samples": samples, "elapsed_s": clock() - t0}
