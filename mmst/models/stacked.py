"""Compute requests: a streaming step written once, run alone or stacked with other streams' steps.

A streaming step that needs the model (a stream's VAD windows, encoder block, decoder step) is written
as a generator: it *yields* a request object describing the call and receives the call's result from
``yield``; its return value is the step's result. Two drivers run such generators:

* :func:`run_alone`: every request is computed on its own, as soon as it is yielded (``request.run()``).
  Synchronous APIs (``EncoderStream.accept_frames``, ``LongFormTranslator.push``, ...) are this driver
  over their generator, so there is one code path.
* :func:`run_stacked`: many generators (one per stream) advance together in rounds. Each round groups the
  requests the unfinished generators are waiting on by :meth:`Request.stack_key` (same kind of call on
  the same model) and computes the LARGEST group with ONE stacked call
  (``type(request).run_stacked(requests)``: padded tensors plus masks, so padding contributes nothing;
  a group of one runs alone); ties go to the earlier pipeline ``stage`` (VAD, then encoder, then
  decoder). The other streams wait a round, so streams that are a few requests apart (e.g. one more
  VAD window) catch up and their next calls are stacked too.

A request class implements ``run() -> result``, ``stack_key() -> hashable``, the classmethod
``run_stacked(requests) -> [result, ...]`` (results in request order; an exception instance as a result
is raised in that stream's generator only) and an int class attribute ``stage`` (its place in a stream's
pipeline). It may implement ``save_state() -> restore`` (a callable that puts back the stream state the
request mutates: cache lengths, recurrent states), which makes a failed stacked call recoverable: when
``run_stacked`` raises, every request's state is restored and each request is run alone, so only the
requests that fail alone fail their streams (one bad stream cannot fail the streams it was stacked
with). Without ``save_state`` a failed stacked call fails every stream of its group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from typing import Any, Protocol

logger = logging.getLogger("mmst.models.stacked")

#: a step written as a generator: yields requests, receives their results, returns the step's value
Steps = Generator[Any, Any, Any]


class Request(Protocol):
    """One model call of one stream (see the module docstring)."""

    stage: int

    def run(self) -> Any:
        """Compute this request alone; its result."""

    def stack_key(self) -> Any:
        """Requests with equal keys can be computed by one ``run_stacked`` call."""

    @classmethod
    def run_stacked(cls, requests: list) -> list:
        """Compute ``requests`` (equal keys) at once; their results in order."""

    # optional: ``def save_state(self) -> Callable[[], None]`` (see the module docstring)


def run_alone(steps: Steps) -> Any:
    """Drive ``steps`` computing every request on its own; returns the generator's value."""
    try:
        req = next(steps)
        while True:
            req = steps.send(req.run())
    except StopIteration as stop:
        return stop.value


def steps_of(obj: Any, method: str, *args: Any, **kwargs: Any) -> Steps:
    """``obj.<method>_steps(*args, **kwargs)`` when ``obj``'s class defines it, else a generator that
    yields nothing and returns ``obj.<method>(*args, **kwargs)`` (objects without a stepped form, e.g. a
    test double or an oracle segmenter, are computed inline). Only the class is consulted, so a wrapper
    that forwards unknown attributes to an inner object does not skip its own ``<method>``."""
    if callable(getattr(type(obj), f"{method}_steps", None)):
        return getattr(obj, f"{method}_steps")(*args, **kwargs)
    return _inline(getattr(obj, method), args, kwargs)


def _inline(fn, args, kwargs) -> Steps:
    return fn(*args, **kwargs)
    yield  # noqa: B901 - makes this a generator


class StackStats:
    """Counters of :func:`run_stacked`: ``calls`` (model calls made), ``requests`` (requests served),
    ``rounds``; per kind (request class name) in ``by_kind`` as ``[calls, requests]``; ``retried``:
    stacked calls that raised and were recomputed request by request."""

    def __init__(self) -> None:
        self.calls = 0
        self.requests = 0
        self.rounds = 0
        self.retried = 0
        self.by_kind: dict[str, list[int]] = {}

    def add(self, kind: str, n: int) -> None:
        self.calls += 1
        self.requests += n
        c = self.by_kind.setdefault(kind, [0, 0])
        c[0] += 1
        c[1] += n


def run_stacked(steps: list[Steps], stats: StackStats | None = None, costs: list[float] | None = None,
                on_done: Callable[[int, Any, BaseException | None], None] | None = None,
                ) -> list[tuple[Any, BaseException | None]]:
    """Drive every generator of ``steps`` together, stacking their requests round by round.

    Args:
        steps: one generator per stream.
        stats: counters to update (calls, requests, rounds), or None.
        costs: when given (a list of ``len(steps)`` floats), each generator's compute seconds are added
            to its entry: the time spent in its own code plus an equal share of each stacked call it
            was part of (so the costs of a tick add up to its duration).
        on_done: called as ``on_done(i, value, error)`` as soon as generator ``i`` has finished (its cost
            in ``costs`` is then final), while the others may still be computing.

    Returns:
        ``[(value, None) | (None, error), ...]`` per generator, in order. A generator that raises gets
        its error reported and the others go on. A stacked call that raises is retried request by
        request when every request of the group has ``save_state`` (their states restored first); only
        the requests that fail alone have their error thrown into their generators. Otherwise the error
        is thrown into every generator of the group.
    """
    out: list[tuple[Any, BaseException | None]] = [(None, None)] * len(steps)
    waiting: dict[int, Any] = {}
    spent = costs if costs is not None else [0.0] * len(steps)

    def advance(i: int, value: Any = None, error: BaseException | None = None, first: bool = False) -> None:
        g = steps[i]
        t = time.perf_counter()
        try:
            if first:
                req = next(g)
            elif error is not None:
                req = g.throw(error)
            else:
                req = g.send(value)
        except StopIteration as stop:
            out[i] = (stop.value, None)
        except Exception as e:  # noqa: BLE001 - reported for this generator only
            out[i] = (None, e)
        else:
            waiting[i] = req
            return
        finally:
            spent[i] += time.perf_counter() - t
        waiting.pop(i, None)
        if on_done is not None:
            on_done(i, *out[i])

    for i in range(len(steps)):
        advance(i, first=True)
    while waiting:
        groups: dict[Any, list[int]] = {}
        for i, req in waiting.items():
            groups.setdefault(req.stack_key(), []).append(i)
        if stats is not None:
            stats.rounds += 1
        idx = max(groups.values(), key=lambda ix: (len(ix), -waiting[ix[0]].stage))
        reqs = [waiting[i] for i in idx]
        t = time.perf_counter()
        try:
            res = [reqs[0].run()] if len(reqs) == 1 else _run_group(reqs, stats)
        except Exception as e:  # noqa: BLE001 - this group's streams fail, the others go on
            for i in idx:
                advance(i, error=e)
            continue
        finally:
            share = (time.perf_counter() - t) / len(idx)
            for i in idx:
                spent[i] += share
        if stats is not None:
            stats.add(type(reqs[0]).__name__, len(reqs))
        for i, r in zip(idx, res):
            if isinstance(r, BaseException):  # that request's own failure: its stream only
                advance(i, error=r)
            else:
                advance(i, r)
    return out


def _run_group(reqs: list, stats: StackStats | None) -> list:
    """``run_stacked(reqs)``; when it raises and every request can restore its state, each request
    alone (its exception, if any, as its result); else the stacked call's exception."""
    restores = [r.save_state() if callable(getattr(r, "save_state", None)) else None for r in reqs]
    try:
        return type(reqs[0]).run_stacked(reqs)
    except Exception as e:  # noqa: BLE001 - recomputed alone below, or raised
        if any(x is None for x in restores):
            raise
        logger.warning("stacked %s call of %d requests failed (%s: %s); computing them one by one",
                       type(reqs[0]).__name__, len(reqs), type(e).__name__, str(e)[:120])
        if stats is not None:
            stats.retried += 1
        for restore in restores:
            restore()
        out = []
        for r in reqs:
            try:
                out.append(r.run())
            except Exception as err:  # noqa: BLE001 - this request's stream only
                out.append(err)
        return out
