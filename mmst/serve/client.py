"""A Python client of the mmst-serve protocol (used by the benchmark, the tests and as an example).

:func:`stream_audio` opens ``ws://HOST:PORT/ws``, sends ``start``, the audio in frames (at real-time
speed or faster, at a pace declared in ``start``), then ``end``, and collects every event until the
server closes. It also measures each word's latency as the client sees it (:class:`ClientLatency`):
from the moment the audio the word needed was due (for a real-time client, when that audio was
spoken) to receiving the word, which includes what the server's ``added_ms`` leaves out (the network,
websockets' buffers, the wait for the event loop, and a client that could not send on time).
"""

from __future__ import annotations

import asyncio
import json
import time
from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from .protocol import DEFAULT_MAX_RATE


@dataclass
class StreamResult:
    """What one stream got back.

    Attributes:
        words: the ``word`` events in arrival order.
        segments: the ``segment_end`` events.
        summary: the ``summary`` event (None when the stream was closed before it).
        close_code, close_reason: how the server closed the connection.
        events: every event, in order.
        lags_ms: per word (same order as ``words``), the client-measured latency in ms
            (:meth:`ClientLatency.word`): from the due time of the frame whose end reached the word's
            ``start_ms`` (the last frame when none did) to receiving the word (``time.monotonic``).
        send_late_ms: per frame sent, how late the client sent it (ms after its due time; a send that
            waited for the server to read, or a client process short of CPU, shows here).
    """

    words: list[dict] = field(default_factory=list)
    segments: list[dict] = field(default_factory=list)
    summary: dict | None = None
    close_code: int | None = None
    close_reason: str = ""
    events: list[dict] = field(default_factory=list)
    lags_ms: list[float] = field(default_factory=list)
    send_late_ms: list[float] = field(default_factory=list)

    def text(self, lang: str) -> str:
        """The words of ``lang`` joined by spaces."""
        return " ".join(w["text"] for w in self.words if w["lang"] == lang)


class ClientLatency:
    """The client's latency bookkeeping: when each frame was due and when each word came back.

    A frame is *due* when its audio is available to the client: for a real-time client (a live speaker),
    when the frame's last sample has been spoken, ``t0 + end_ms / 1000`` with ``t0`` the moment the first
    sample was; for a paced file client, the moment its pace allows the frame. A word written after
    ``start_ms`` of audio (the ``word`` event's delay) needed the first frame whose end reaches
    ``start_ms``; its latency is the word's receive time minus that frame's due time. Timing from the due
    time rather than from the send, a frame the client sent late (it waited for the server to read, or
    the client lacked CPU) counts against the latency, as it does for a person listening.

    Times are seconds of one monotonic clock (``time.monotonic``); audio positions are ms since the stream's
    first sample. Frames must be registered in order (``end_ms`` increasing).
    """

    def __init__(self) -> None:
        self._end_ms: list[float] = []
        self._due_s: list[float] = []

    def frame(self, end_ms: float, due_s: float) -> None:
        """Register the next frame: the audio sent once it is out (``end_ms``) and when it was due (``due_s``).

        Raises:
            ValueError: ``end_ms`` not after the previous frame's.
        """
        if self._end_ms and end_ms <= self._end_ms[-1]:
            raise ValueError(f"frame end {end_ms} ms is not after the previous frame's {self._end_ms[-1]} ms")
        self._end_ms.append(float(end_ms))
        self._due_s.append(float(due_s))

    def word(self, start_ms: float, received_s: float) -> float:
        """The latency (ms, rounded to 0.1 ms) of a word written after ``start_ms`` of audio and received at
        ``received_s``; NaN when no frame was registered. ``start_ms`` is the server's, rounded to 0.1 ms,
        so a frame whose end lies within 0.05 ms of it counts as reaching it."""
        if not self._end_ms:
            return float("nan")
        i = min(bisect_left(self._end_ms, float(start_ms) - 0.05), len(self._end_ms) - 1)
        return round((received_s - self._due_s[i]) * 1000.0, 1)


def encode_audio(samples: np.ndarray, sample_format: str) -> bytes:
    """float32 samples in [-1, 1] -> little-endian ``int16`` (clipped, scaled by 32768) or ``float32`` bytes."""
    x = np.asarray(samples, dtype=np.float32)
    if sample_format == "int16":
        return np.clip(np.round(x * 32768.0), -32768, 32767).astype("<i2").tobytes()
    return x.astype("<f4").tobytes()


async def stream_audio(url: str, samples: np.ndarray, sample_rate: int = 16000, *, langs: list[str] | None = None,
                       sample_format: str = "int16", frame_ms: float = 100.0, realtime: bool = True,
                       rate: float | None = None, token: str | None = None, open_timeout: float = 30.0,
                       headers: dict | None = None) -> StreamResult:
    """Stream ``samples`` (float32 ``(n,)`` at ``sample_rate``) and collect the server's events.

    Args:
        url: ``ws://HOST:PORT/ws``.
        langs: languages to ask for (default: all the server serves).
        sample_format: ``"int16"`` or ``"float32"`` on the wire.
        frame_ms: audio per binary message.
        realtime: pace the frames by the wall clock (a live speaker: frame ``i`` once it is over);
            False = a file: declare ``rate`` in ``start`` and send as fast as the server allows, i.e. up to
            half its ``max_ahead_s`` ahead of ``rate`` times real time (from its ``ready`` message).
        rate: the pace to declare when ``realtime`` is False (audio s per s; default
            :data:`~mmst.serve.protocol.DEFAULT_MAX_RATE`, the server's default ``--max-rate``).
        token: sent as ``Authorization: Bearer`` when given.
        headers: more HTTP headers of the handshake (e.g. ``Origin``).

    Returns:
        :class:`StreamResult` (the server's close code tells how it ended).
    """
    res = StreamResult()
    hdrs = dict(headers or {})
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    pace = 1.0 if realtime else float(rate or DEFAULT_MAX_RATE)
    async with connect(url, additional_headers=hdrs or None, open_timeout=open_timeout, max_size=None,
                       compression=None) as ws:
        start = {"type": "start", "sample_rate": sample_rate, "sample_format": sample_format}
        if not realtime:
            start["rate"] = pace
        if langs:
            start["langs"] = list(langs)
        await ws.send(json.dumps(start))
        try:
            ready = json.loads(await ws.recv())
        except ConnectionClosed:  # refused (bad start, server full, ...)
            ready = None
        if ready is not None:
            res.events.append(ready)
        lead_s = 0.5 * float(ready.get("max_ahead_s", 0.0)) if isinstance(ready, dict) else 0.0
        latency = ClientLatency()

        async def receive() -> None:
            try:
                async for message in ws:
                    now = time.monotonic()
                    ev = json.loads(message)
                    res.events.append(ev)
                    if ev["type"] == "word":
                        res.words.append(ev)
                        res.lags_ms.append(latency.word(float(ev["start_ms"]), now))
                    elif ev["type"] == "segment_end":
                        res.segments.append(ev)
                    elif ev["type"] == "summary":
                        res.summary = ev
            except ConnectionClosed:
                pass

        reader = asyncio.create_task(receive())
        n = max(1, int(round(frame_ms * sample_rate / 1000.0)))
        t0 = time.monotonic()
        try:
            for s in range(0, len(samples) if ready is not None else 0, n):
                end_s = min(s + n, len(samples)) / sample_rate  # audio seconds once this frame is sent
                # a live source has a frame only once it is over; a file, at most lead_s ahead of its pace
                due = t0 + end_s if realtime else t0 + max(0.0, end_s - lead_s) / pace
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                latency.frame(end_s * 1000.0, due)  # before the send: its word may come back before it returns
                res.send_late_ms.append(round(max(0.0, time.monotonic() - due) * 1000.0, 1))
                await ws.send(encode_audio(samples[s:s + n], sample_format))
            await ws.send(json.dumps({"type": "end"}))
        except ConnectionClosed:
            pass
        await reader
    res.close_code = ws.close_code
    res.close_reason = ws.close_reason or ""
    return res
