"""Scheduling the streams of one server onto one compute thread: dynamic batching per tick, with the
model calls of different streams stacked into one call.

All streams share one model and one compute thread (torch's intra-op threads are set by
``mmst-serve --threads``); the asyncio event loop only receives audio and sends events. Two modes:

* ``"tick"`` (default, cross-stream batching): whenever the compute thread is free, ONE tick takes every
  stream that has audio waiting (or has ended) and steps them all together with ALL of their waiting
  audio. A stream's step is a generator of compute requests (:mod:`mmst.models.stacked`); the tick
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

  While a tick computes, new audio of every stream accumulates, so under load the ticks grow and more
  streams have a request in the same round. What is not stacked runs inside the stream's own step: the
  fbank, the conv subsampler, policy decisions, detokenisation, hypothesis policies (local agreement,
  hold-n, beam search) and async or re-encoding models.
* ``"off"`` (the baseline the benchmark compares against): every received frame is a job of its own,
  computed alone (every model call on its own), in arrival order, on the same compute thread; N streams
  cost N separate streams.

The words are the same in both modes: the long-form driver cuts the audio it is given into its own
fixed chunks (``chunk_ms``), so how audio was grouped into calls does not change what is written, and
padded positions are masked out of every stacked call, so stacking changes the floats by rounding
only (tested: several streams of different audio, lengths and start times, stacked, alone and through
the offline long-form path, give the same words).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from mmst.models.stacked import StackStats, run_stacked

from .session import StreamSession

logger = logging.getLogger("mmst.serve")

BATCHING_MODES = ("tick", "off")

#: callback(session, events, error): deliver a step's events (or the exception it raised) on the loop
Deliver = Callable[[StreamSession, list, BaseException | None], None]


class TickScheduler:
    """Runs the sessions' compute on one thread (see the module docstring).

    Args:
        deliver: called on the event loop with ``(session, events, None)`` after each step of a
            session, or ``(session, [], error)`` when its step raised (the other sessions go on).
        mode: ``"tick"`` or ``"off"``.

    Raises:
        ValueError: unknown mode.
    """

    def __init__(self, deliver: Deliver, mode: str = "tick") -> None:
        if mode not in BATCHING_MODES:
            raise ValueError(f"batching mode must be one of {BATCHING_MODES}, got {mode!r}")
        self.deliver = deliver
        self.mode = mode
        self.sessions: set[StreamSession] = set()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mmst-compute")
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._jobs: set[asyncio.Task] = set()
        self.ticks = 0
        self.steps = 0
        self.busy_s = 0.0
        self.stack = StackStats()  # tick mode: model calls made / requests they served

    def start(self) -> None:
        """Start the tick loop on the running event loop (tick mode)."""
        if self.mode == "tick" and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="mmst-ticks")

    async def stop(self) -> None:
        """Stop the tick loop and the compute thread."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._executor.shutdown(wait=True)

    def add(self, session: StreamSession) -> None:
        """Register a session (its audio is computed from now on)."""
        self.sessions.add(session)

    def remove(self, session: StreamSession) -> None:
        """Forget a session (a disconnected client): it is not stepped again; a tick in progress may
        still finish its current step, whose events are then dropped by the server."""
        self.sessions.discard(session)

    async def run(self, fn, *args):
        """``fn(*args)`` on the compute thread, after the steps already queued there; its result."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def notify(self, session: StreamSession) -> None:
        """A session received a frame or ``end``. Tick mode: wake the tick loop. Off: queue one job for
        this frame on the compute thread (jobs run in arrival order; the caller does not wait, so the
        connection keeps reading, answering pings, while the backlog is computed)."""
        if self.mode == "tick":
            self._wake.set()
            return
        task = asyncio.get_running_loop().create_task(self._frame_job(session))
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    async def _frame_job(self, session: StreamSession) -> None:
        loop = asyncio.get_running_loop()
        try:
            events, err = await loop.run_in_executor(self._executor, self._step_one, session)
        except RuntimeError:  # the executor was shut down while stopping
            return
        if session in self.sessions:
            self.deliver(session, events, err)

    def _step_one(self, session: StreamSession) -> tuple[list, BaseException | None]:
        """Off mode, on the compute thread: the session's oldest frame alone (or its end)."""
        if session not in self.sessions:
            return [], None
        t = time.perf_counter()
        try:
            return session.step(session.take_pending(1)), None
        except Exception as e:  # noqa: BLE001 - a failing stream must not stop the others
            logger.exception("stream failed in its step")
            return [], e
        finally:
            self.busy_s += time.perf_counter() - t
            self.steps += 1

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = [s for s in self.sessions if s.has_work()]
            if not batch:
                continue
            try:
                await loop.run_in_executor(self._executor, self._compute, batch, loop)
            except RuntimeError:  # the executor was shut down while stopping
                return
            self.ticks += 1
            if any(s.has_work() for s in self.sessions):
                self._wake.set()

    def _compute(self, batch: list[StreamSession], loop: asyncio.AbstractEventLoop) -> None:
        """One tick on the compute thread: step every session of ``batch`` with all its audio, their
        model calls stacked (:func:`mmst.models.stacked.run_stacked`). Each session's events are handed
        to the event loop as soon as its own step has finished, not at the end of the tick."""
        t = time.perf_counter()
        costs = [0.0] * len(batch)

        def done(i: int, events: list | None, err: BaseException | None) -> None:
            s = batch[i]
            s.compute_s += costs[i]
            if err is not None:
                logger.error("stream failed in its step", exc_info=err)
            loop.call_soon_threadsafe(self._deliver_if_open, s, events or [], err)

        run_stacked([s.step_steps() for s in batch], self.stack, costs, done)
        self.steps += len(batch)
        self.busy_s += time.perf_counter() - t

    def _deliver_if_open(self, session: StreamSession, events: list, err: BaseException | None) -> None:
        if session in self.sessions:
            self.deliver(session, events, err)
