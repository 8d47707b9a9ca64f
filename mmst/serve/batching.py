"""Scheduling the streams of one server onto its compute threads: dynamic batching per tick, with the
model calls of different streams stacked into one call.

All streams share one model; the asyncio event loop only receives audio and sends events. The compute
runs on up to ``workers`` threads (``mmst-serve --compute-workers``, default: one per two CPU cores, at
most :data:`MAX_DEFAULT_WORKERS`): a tick's streams are split into disjoint groups of about equal size, at
least ``min_group`` streams each (``--worker-min-streams``, default :data:`DEFAULT_MIN_GROUP`), each group
stepped (and its calls stacked) on its own thread, the groups in parallel. Below ``2 * min_group``
streams a tick is one group on one thread: splitting a light load would only halve what each call
stacks. torch
releases the GIL inside its kernels, so the groups overlap in the model calls while the Python of the
steps (policies, detokenisation, bookkeeping) takes turns. Each stream is in one group per tick, so its
state is never touched by two threads at once; the model is only read. torch's intra-op threads
(``--threads``, default 1) stay at 1 per worker: the stacked calls are small (tens of rows), where
splitting one operator over cores costs more than it gains. Two modes:

* ``"tick"`` (default, cross-stream batching): whenever the compute thread is free, ONE tick takes every
  stream that has audio waiting (or has ended) and steps them all together, each with its waiting audio
  up to ``max_step_samples`` (default 320 ms: one chunk of the long-form driver), so a stream with a
  backlog (a client that sent far ahead) is computed over several ticks and cannot delay the others by
  more than one bounded step per tick. A stream's step is a generator of compute requests (:mod:`mmst.models.stacked`); the tick
  advances the streams' generators in rounds and computes, per round, the largest group of requests of
  one kind in one stacked call (the other streams wait a round and catch up):

  - Silero VAD windows (32 ms): the stateless front end of every new window of every stream in one
    call, then the LSTM cell and head once per window index with the streams as the batch (each
    stream's LSTM state and context live on its :class:`~mmst.simultaneous.vad.StreamingVad`; one model
    serves every stream; the long-form driver feeds the segmenter as audio arrives, so every stream
    with new audio has windows);
  - encoder blocks (the new pre-decision chunks of a stream): one call per encoder layer; queries padded
    to the longest block, each stream's key/value cache copied into one padded tensor, masks that give
    every real query exactly the keys it has alone (chunk-causal over its own cache) and nothing of
    the padding;
  - decoder steps (one token per language row of each stream, token policies): one call per decoder
    layer, rows of all streams stacked; self-attention over padded caches masked to each row's valid
    columns, cross-attention grouped per stream over its own encoder states, masked to each row's
    visible states.

  - the front end of the new fbank frames (:class:`~mmst.simultaneous.frontend_request.FrontEndFrames`):
    global CMVN over every stream's frames in one call, then one ``conv1d`` per conv-subsampler layer over
    every stream's window of new outputs (the fbank itself is computed per stream by kaldi-native-fbank
    as the samples come).

  Ticks gather: when the previous tick started less than ``tick_ms`` ago (default
  :data:`DEFAULT_TICK_MS`), the loop waits for the rest of that interval, or until ``tick_streams``
  streams (default :data:`DEFAULT_TICK_STREAMS`; or every stream, when there are fewer) have audio
  waiting, before taking the batch, so that the frames the clients send meanwhile are computed together:
  with clients sending 100 ms frames, up to 8 clients get one frame of every stream in each tick, which
  stacks every stream's VAD windows and the blocks of the streams whose 320 ms chunk completed in it;
  with more clients the ticks come faster (8 streams' frames arrive sooner), so the wait, and the added
  latency it costs, shrinks as the load grows, while each tick still stacks 8 streams or more. The price
  is at most ``tick_ms`` of added latency (a frame that arrives just after a tick started waits for the
  next); ``tick_ms=0`` starts a tick as soon as the compute threads are free. While a tick computes, new audio of every stream accumulates, so under load the
  ticks grow and more streams have a request in the same round. What is not stacked runs inside the
  stream's own step: the fbank, the embedding of the conv outputs, policy decisions, detokenisation,
  hypothesis policies (local agreement, hold-n, beam search) and async or re-encoding models.
* ``"off"`` (the baseline the benchmark compares against): every received frame is computed alone
  (every model call on its own) on the same compute threads, in rounds: each round steps every stream
  with audio waiting by its oldest frame (at most ``max_step_samples``), the streams split over the
  workers as in a tick; N streams cost N separate streams. One loop serves every stream (no task per
  frame), with the same bounds as ``"tick"`` (no ``tick_ms`` wait: a frame is computed when it comes).

The loop is supervised: an exception outside a stream's own step (a stream's error closes that stream
only) is logged once with its traceback (through the server's rate limiter), the streams of that tick
whose steps had not finished are closed (1011; those whose steps finished got their events and go on)
and the loop goes on. :meth:`TickScheduler.health` reports its state (``GET /healthz``), including a
heartbeat of the compute threads: a tick that has been running, or waiting for a compute thread, for
longer than the server's stall timeout makes it ``"stalled"``.

The words are the same in both modes: the long-form driver cuts the audio it is given into its own
fixed chunks (``chunk_ms``), so how audio was grouped into calls does not change what is written, and
padded positions are masked out of every stacked call, so stacking changes the floats by rounding
only (tested: several streams of different audio, lengths and start times, stacked, alone and through
the offline long-form path, give the same words).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from mmst.models.stacked import StackStats, run_stacked

from .limits import RateLimitedLog
from .session import StreamSession

logger = logging.getLogger("mmst.serve")

BATCHING_MODES = ("tick", "off")
#: default bound on the audio one step of a stream takes: 320 ms at 16 kHz (one long-form chunk)
DEFAULT_MAX_STEP_SAMPLES = 5120
#: default shortest interval between the starts of two ticks (ms): one 100 ms client frame
DEFAULT_TICK_MS = 100.0
#: default number of streams with audio waiting that start a tick before the interval is over
DEFAULT_TICK_STREAMS = 8
#: most compute threads by default (one per core up to this)
MAX_DEFAULT_WORKERS = 4
#: default fewest streams per compute thread in a tick
DEFAULT_MIN_GROUP = 8


def default_workers() -> int:
    """Compute threads sized to the machine: one per two CPU cores this process may use (at least 1, at most
    :data:`MAX_DEFAULT_WORKERS`). The threads overlap only inside torch's kernels (the Python of the steps
    holds the interpreter lock), and the event loop, the VAD and the clients' network need a core too: on
    2 cores a second thread gains little at light load and costs latency near saturation, which is what
    bounds how many streams a server holds (``bench/bench_serve.py``'s two-thread rows, ``docs/serving.md``)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(MAX_DEFAULT_WORKERS, n // 2))

#: callback(session, events, error): deliver a step's events (or the exception it raised) on the loop
Deliver = Callable[[StreamSession, list, BaseException | None], None]


class TickScheduler:
    """Runs the sessions' compute on one thread (see the module docstring).

    Args:
        deliver: called on the event loop with ``(session, events, None)`` after each step of a
            session, or ``(session, [], error)`` when its step raised or its tick failed (the other
            sessions go on).
        mode: ``"tick"`` or ``"off"``.
        max_step_samples: most 16 kHz samples of queued audio one step of a session takes (>= 1).
        workers: compute threads (>= 1); the streams of a tick are split into this many groups computed
            in parallel. None = :func:`default_workers`.
        tick_ms: shortest interval between the starts of two ticks, ms (>= 0; tick mode only), unless
            ``tick_streams`` streams have audio waiting before it is over.
        tick_streams: streams with audio waiting that start a tick before ``tick_ms`` is over (>= 1).
        min_group: fewest streams per group when a tick is split over the workers (>= 1).
        clock: monotonic clock (s) of the tick intervals.
        log: where warnings and errors go (the server's rate limiter; default: one of its own).
        health_clock: monotonic clock (s) of the heartbeat (default ``clock``; tests pass a fake one).

    Raises:
        ValueError: unknown mode, ``max_step_samples < 1``, ``workers < 1``, ``tick_ms < 0``,
            ``tick_streams < 1`` or ``min_group < 1``.
    """

    def __init__(self, deliver: Deliver, mode: str = "tick", max_step_samples: int = DEFAULT_MAX_STEP_SAMPLES,
                 *, workers: int | None = 1, tick_ms: float = 0.0, tick_streams: int = DEFAULT_TICK_STREAMS,
                 min_group: int = DEFAULT_MIN_GROUP, clock: Callable[[], float] = time.monotonic,
                 log: RateLimitedLog | None = None, health_clock: Callable[[], float] | None = None) -> None:
        if mode not in BATCHING_MODES:
            raise ValueError(f"batching mode must be one of {BATCHING_MODES}, got {mode!r}")
        if max_step_samples < 1:
            raise ValueError(f"max_step_samples must be >= 1, got {max_step_samples}")
        workers = default_workers() if workers is None else int(workers)
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not tick_ms >= 0:
            raise ValueError(f"tick_ms must be >= 0, got {tick_ms}")
        if min_group < 1:
            raise ValueError(f"min_group must be >= 1, got {min_group}")
        if tick_streams < 1:
            raise ValueError(f"tick_streams must be >= 1, got {tick_streams}")
        self.deliver = deliver
        self.mode = mode
        self.max_step_samples = int(max_step_samples)
        self.workers = workers
        self.min_group = int(min_group)
        self.tick_streams = int(tick_streams)
        self.tick_s = float(tick_ms) / 1000.0 if mode == "tick" else 0.0
        self.clock = clock
        self.health_clock = health_clock or clock
        self.log = log if log is not None else RateLimitedLog(logger)
        self._tick_started: float | None = None  # health_clock time the tick in flight was submitted
        self._tick_done: set[StreamSession] = set()  # sessions whose step of the tick in flight finished
        self.sessions: set[StreamSession] = set()
        # the coordinator: runs each tick (and its first group) and ``run``; helpers: the other groups
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mmst-compute")
        self._helpers = (ThreadPoolExecutor(max_workers=workers - 1, thread_name_prefix="mmst-compute-helper")
                         if workers > 1 else None)
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self.ticks = 0
        self.steps = 0
        self.busy_s = 0.0
        self.errors = 0  # loop failures survived (not a stream's own step failing)
        self.last_error: str | None = None
        self.stack = StackStats()  # tick mode: model calls made / requests they served

    def start(self) -> None:
        """Start the scheduling loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="mmst-ticks")

    async def stop(self) -> None:
        """Stop the loop and the compute thread."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._executor.shutdown(wait=True)
        if self._helpers is not None:
            self._helpers.shutdown(wait=True)

    def health(self, stall_s: float | None = None) -> dict:
        """``{"loop": "running" | "stalled" | "stopped" | "dead" | "not started", "ticks", "steps",
        "errors", "last_error", "tick_running_s"}``: ``dead`` = the loop task ended on its own (it should
        never); ``stalled`` = a tick (work that waits) was handed to the compute threads more than
        ``stall_s`` seconds ago and has not finished (a compute thread stuck or far too slow);
        ``tick_running_s``: how long the tick in flight has been (None when none is)."""
        started = self._tick_started
        running_s = None if started is None else round(self.health_clock() - started, 3)
        if self._task is None:
            state = "stopped" if self._stopping else "not started"
        elif self._task.done():
            state = "stopped" if self._stopping else "dead"
        elif stall_s is not None and running_s is not None and running_s > stall_s:
            state = "stalled"
        else:
            state = "running"
        return {"loop": state, "ticks": self.ticks, "steps": self.steps, "errors": self.errors,
                "last_error": self.last_error, "tick_running_s": running_s}

    def add(self, session: StreamSession) -> None:
        """Register a session (its audio is computed from now on)."""
        self.sessions.add(session)

    def remove(self, session: StreamSession) -> None:
        """Forget a session (a disconnected client): it is not stepped again; a tick in progress may
        still finish its current step, whose events are then dropped by the server."""
        self.sessions.discard(session)

    async def run(self, fn, *args):
        """``fn(*args)`` on the compute thread that runs the ticks, after the steps already queued there;
        its result (no tick runs meanwhile)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def notify(self, session: StreamSession) -> None:
        """A session received a frame or ``end``: wake the loop (the caller does not wait for the
        compute, so the connection keeps reading, answering pings, while a backlog is computed)."""
        self._wake.set()

    def _step_one(self, session: StreamSession) -> tuple[list, BaseException | None]:
        """Off mode, on a compute thread: the session's oldest frame alone (or its end)."""
        if session not in self.sessions:
            return [], None
        try:
            return session.step(session.take_pending(1, self.max_step_samples)), None
        except Exception as e:  # noqa: BLE001 - a failing stream must not stop the others
            return [], e
        finally:
            self._tick_done.add(session)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_start = -float("inf")
        while True:
            await self._wake.wait()
            self._wake.clear()
            wait = last_start + self.tick_s - self.clock()
            if wait > 0:  # gather: the frames arriving before the interval is over join this tick
                await self._gather(wait)
            batch: list[StreamSession] = []
            try:
                batch = [s for s in self.sessions if s.has_work()]
                if not batch:
                    continue
                last_start = self.clock()
                fn = self._compute if self.mode == "tick" else self._compute_off
                self._tick_done = set()
                self._tick_started = self.health_clock()
                try:
                    await loop.run_in_executor(self._executor, fn, batch, loop)
                finally:
                    self._tick_started = None
                self._tick_done = set()  # holds no session beyond its tick
                self.ticks += 1
                if any(s.has_work() for s in self.sessions):
                    self._wake.set()
            except Exception as e:  # noqa: BLE001 - supervised: log, close this tick's streams, go on
                if self._stopping:  # the executor was shut down while stopping
                    return
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"[:200]
                failed = [s for s in batch if s not in self._tick_done]
                self._tick_done = set()
                self.log.log(logging.ERROR, "scheduling loop: unexpected error; closing the %d of %d stream(s) "
                             "of this tick whose steps had not finished", len(failed), len(batch), exc_info=True)
                for s in failed:
                    self._deliver_if_open(s, [], e)
                    self.remove(s)
                if any(s.has_work() for s in self.sessions):
                    self._wake.set()

    def _enough(self) -> bool:
        """``tick_streams`` sessions have work (or every session has: nothing more can join)."""
        need = min(self.tick_streams, len(self.sessions))
        return sum(1 for s in self.sessions if s.has_work()) >= need

    async def _gather(self, wait_s: float) -> None:
        """Wait ``wait_s`` seconds, or less once :meth:`_enough` sessions have work."""
        deadline = self.clock() + wait_s
        while not self._enough():
            left = deadline - self.clock()
            if left <= 0:
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except asyncio.TimeoutError:
                return

    def _groups(self, batch: list[StreamSession]) -> list[list[int]]:
        """Indices of ``batch`` split into at most ``workers`` disjoint groups of about equal size, at
        least ``min_group`` indices each (one group when ``batch`` is smaller)."""
        k = max(1, min(self.workers, len(batch) // self.min_group))
        return [list(range(g, len(batch), k)) for g in range(k)]

    def _parallel(self, groups: list[list[int]], fn: Callable[[list[int], StackStats], None]) -> None:
        """``fn(group, stats)`` for every group: the first on this thread, the others on the helpers, in
        parallel; the groups' stacking counters are added to :attr:`stack`; the first error is raised
        once every group has finished."""
        stats = [StackStats() for _ in groups]
        futures = [self._helpers.submit(fn, g, st) for g, st in zip(groups[1:], stats[1:])] if len(groups) > 1 else []
        error: BaseException | None = None
        try:
            fn(groups[0], stats[0])
        except Exception as e:  # noqa: BLE001 - raised below, after the other groups
            error = e
        for f in futures:
            try:
                f.result()
            except Exception as e:  # noqa: BLE001 - raised below
                error = error or e
        for st in stats:
            _merge_stats(self.stack, st)
        if error is not None:
            raise error

    def _compute(self, batch: list[StreamSession], loop: asyncio.AbstractEventLoop) -> None:
        """One tick on the compute threads: step every session of ``batch`` with its waiting audio (at
        most ``max_step_samples``), their model calls stacked (:func:`mmst.models.stacked.run_stacked`)
        within each of the ``workers`` groups, the groups in parallel. Each session's events are handed
        to the event loop as soon as its own step has finished, not at the end of the tick."""
        t = time.perf_counter()

        def group(idx: list[int], stats: StackStats) -> None:
            sessions = [batch[i] for i in idx]
            costs = [0.0] * len(sessions)

            def done(j: int, events: list | None, err: BaseException | None) -> None:
                s = sessions[j]
                self._tick_done.add(s)
                s.compute_s += costs[j]
                loop.call_soon_threadsafe(self._deliver_if_open, s, events or [], err)

            run_stacked([s.step_steps(max_samples=self.max_step_samples) for s in sessions], stats, costs, done)

        self._parallel(self._groups(batch), group)
        self.steps += len(batch)
        self.busy_s += time.perf_counter() - t

    def _compute_off(self, batch: list[StreamSession], loop: asyncio.AbstractEventLoop) -> None:
        """One round of off mode: every session of ``batch`` steps its oldest frame alone, one after the
        other within each of the ``workers`` groups, the groups in parallel."""
        t = time.perf_counter()

        def group(idx: list[int], stats: StackStats) -> None:
            for i in idx:
                events, err = self._step_one(batch[i])
                loop.call_soon_threadsafe(self._deliver_if_open, batch[i], events, err)

        self._parallel(self._groups(batch), group)
        self.steps += len(batch)
        self.busy_s += time.perf_counter() - t

    def _deliver_if_open(self, session: StreamSession, events: list, err: BaseException | None) -> None:
        if session in self.sessions:
            self.deliver(session, events, err)


def _merge_stats(into: StackStats, add: StackStats) -> None:
    """Add the counters of ``add`` to ``into``."""
    into.calls += add.calls
    into.requests += add.requests
    into.rounds += add.rounds
    into.retried += add.retried
    for kind, (calls, requests) in add.by_kind.items():
        c = into.by_kind.setdefault(kind, [0, 0])
        c[0] += calls
        c[1] += requests
