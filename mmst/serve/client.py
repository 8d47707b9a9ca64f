"""A Python client of the mmst-serve protocol (used by the benchmark, the tests and as an example).

:func:`stream_audio` opens ``ws://HOST:PORT/ws``, sends ``start``, the audio in frames (at real-time
speed or as fast as possible), then ``end``, and collects every event until the server closes.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed


@dataclass
class StreamResult:
    """What one stream got back.

    Attributes:
        words: the ``word`` events in arrival order.
        segments: the ``segment_end`` events.
        summary: the ``summary`` event (None when the stream was closed before it).
        close_code, close_reason: how the server closed the connection.
        events: every event, in order.
    """

    words: list[dict] = field(default_factory=list)
    segments: list[dict] = field(default_factory=list)
    summary: dict | None = None
    close_code: int | None = None
    close_reason: str = ""
    events: list[dict] = field(default_factory=list)

    def text(self, lang: str) -> str:
        """The words of ``lang`` joined by spaces."""
        return " ".join(w["text"] for w in self.words if w["lang"] == lang)


def encode_audio(samples: np.ndarray, sample_format: str) -> bytes:
    """float32 samples in [-1, 1] -> little-endian ``int16`` (clipped, scaled by 32768) or ``float32`` bytes."""
    x = np.asarray(samples, dtype=np.float32)
    if sample_format == "int16":
        return np.clip(np.round(x * 32768.0), -32768, 32767).astype("<i2").tobytes()
    return x.astype("<f4").tobytes()


async def stream_audio(url: str, samples: np.ndarray, sample_rate: int = 16000, *, langs: list[str] | None = None,
                       sample_format: str = "int16", frame_ms: float = 100.0, realtime: bool = True,
                       token: str | None = None, open_timeout: float = 30.0) -> StreamResult:
    """Stream ``samples`` (float32 ``(n,)`` at ``sample_rate``) and collect the server's events.

    Args:
        url: ``ws://HOST:PORT/ws``.
        langs: languages to ask for (default: all the server serves).
        sample_format: ``"int16"`` or ``"float32"`` on the wire.
        frame_ms: audio per binary message.
        realtime: pace the frames by the wall clock (a live speaker); False = as fast as possible.
        token: sent as ``Authorization: Bearer`` when given.

    Returns:
        :class:`StreamResult` (the server's close code tells how it ended).
    """
    res = StreamResult()
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with connect(url, additional_headers=headers, open_timeout=open_timeout, max_size=None,
                       compression=None) as ws:
        start = {"type": "start", "sample_rate": sample_rate, "sample_format": sample_format}
        if langs:
            start["langs"] = list(langs)
        await ws.send(json.dumps(start))

        async def receive() -> None:
            try:
                async for message in ws:
                    ev = json.loads(message)
                    res.events.append(ev)
                    if ev["type"] == "word":
                        res.words.append(ev)
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
            for i, s in enumerate(range(0, len(samples), n)):
                if realtime:
                    # a live source has frame i only once it is over
                    await asyncio.sleep(max(0.0, t0 + (i + 1) * frame_ms / 1000.0 - time.monotonic()))
                await ws.send(encode_audio(samples[s:s + n], sample_format))
            await ws.send(json.dumps({"type": "end"}))
        except ConnectionClosed:
            pass
        await reader
    res.close_code = ws.close_code
    res.close_reason = ws.close_reason or ""
    return res
