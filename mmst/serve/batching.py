"""Scheduling the streams of one server onto one compute thread: dynamic batching per tick, with the
model calls of different streams stacked into one call.

All streams share one model and one compute thread (torch's intra-op threads are set by
``mmst-serve --threads``); the asyncio event loop only receives audio and sends events. Two modes:

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

  While a tick computes, new audio of every stream accumulates, so under load the ticks grow and more
  streams have a request in the same round. What is not stacked runs inside the stream's own step: the
  fbank, the conv subsampler, policy decisions, detokenisation, hypothesis policies (local agreement,
  hold-n, beam search) and async or re-encoding models.
* ``"off"`` (the baseline the benchmark compares against): every received frame is computed alone
  (every model call on its own) on the same compute thread, in rounds: each round steps every stream
  with audio waiting by its oldest frame (at most ``max_step_samples``); N streams cost N separate
  streams. One loop serves every stream (no task per frame), with the same bounds as ``"tick"``.

The loop is supervised: an exception outside a stream's own step (a stream's error closes that stream
only) is logged once with its traceback, the streams of that tick are closed (1011) and the loop goes
on; :meth:`TickScheduler.health` reports its state (``GET /healthz``).

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
#: default bound on the audio one step of a stream takes: 320 ms at 16 kHz (one long-form chunk)
DEFAULT_MAX_STEP_SAMPLES = 5120

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

    Raises:
        ValueError: unknown mode, or ``max_step_samples < 1``.
    """

    def __init__(self, deliver: Deliver, mode: str = "tick", max_step_samples: int = DEFAULT_MAX_STEP_SAMPLES
                 ) -> None:
        if mode not in BATCHING_MODES:
            raise ValueError(f"batching mode must be one of {BATCHING_MODES}, got {mode!r}")
        if max_step_samples < 1:
            raise ValueError(f"max_step_samples must be >= 1, got {max_step_samples}")
        self.deliver = deliver
        self.mode = mode
        self.max_step_samples = int(max_step_samples)
        self.sessions: set[StreamSession] = set()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mmst-compute")
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

    def health(self) -> dict:
        """``{"loop": "running" | "stopped" | "dead" | "not started", "ticks", "steps", "errors",
        "last_error"}``: ``dead`` = the loop task ended on its own (it should never)."""
        if self._task is None:
            state = "stopped" if self._stopping else "not started"
        elif self._task.done():
            state = "stopped" if self._stopping else "dead"
        else:
            state = "running"
        return {"loop": state, "ticks": self.ticks, "steps": self.steps, "errors": self.errors,
                "last_error": self.last_error}

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
        """A session received a frame or ``end``: wake the loop (the caller does not wait for the
        compute, so the connection keeps reading, answering pings, while a backlog is computed)."""
        self._wake.set()

    def _step_one(self, session: StreamSession) -> tuple[list, BaseException | None]:
        """Off mode, on the compute thread: the session's oldest frame alone (or its end)."""
        if session not in self.sessions:
            return [], None
        t = time.perf_counter()
        try:
            return session.step(session.take_pending(1, self.max_step_samples)), None
        except Exception as e:  # noqa: BLE001 - a failing stream must not stop the others
            return [], e
        finally:
            self.busy_s += time.perf_counter() - t
            self.steps += 1

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch: list[StreamSession] = []
            try:
                batch = [s for s in self.sessions if s.has_work()]
                if not batch:
                    continue
                if self.mode == "tick":
                    await loop.run_in_executor(self._executor, self._compute, batch, loop)
                else:
                    for s in batch:  # one bounded frame of each stream per round, each alone
                        if s in self.sessions:
                            events, err = await loop.run_in_executor(self._executor, self._step_one, s)
                            self._deliver_if_open(s, events, err)
                self.ticks += 1
                if any(s.has_work() for s in self.sessions):
                    self._wake.set()
            except Exception as e:  # noqa: BLE001 - supervised: log, close this tick's streams, go on
                if self._stopping:  # the executor was shut down while stopping
                    return
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"[:200]
                logger.exception("scheduling loop: unexpected error; closing the %d stream(s) of this tick",
                                 len(batch))
                for s in batch:
                    self._deliver_if_open(s, [], e)
                    self.remove(s)
                if any(s.has_work() for s in self.sessions):
                    self._wake.set()

    def _compute(self, batch: list[StreamSession], loop: asyncio.AbstractEventLoop) -> None:
        """One tick on the compute thread: step every session of ``batch`` with its waiting audio (at
        most ``max_step_samples``), their model calls stacked (:func:`mmst.models.stacked.run_stacked`).
        Each session's events are handed to the event loop as soon as its own step has finished, not at
        the end of the tick."""
        t = time.perf_counter()
        costs = [0.0] * len(batch)

        def done(i: int, events: list | None, err: BaseException | None) -> None:
            s = batch[i]
            s.compute_s += costs[i]
            loop.call_soon_threadsafe(self._deliver_if_open, s, events or [], err)

        run_stacked([s.step_steps(max_samples=self.max_step_samples) for s in batch], self.stack, costs, done)
        self.steps += len(batch)
        self.busy_s += time.perf_counter() - t

    def _deliver_if_open(self, session: StreamSession, events: list, err: BaseException | None) -> None:
        if session in self.sessions:
            self.deliver(session, events, err)
