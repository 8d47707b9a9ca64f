"""Simulated clients for load measurements of mmst-serve (used by ``bench/bench_serve.py``).

Definitions (docs/serving.md):

- *added latency* of a word: from the server receiving the audio frame after which the word could
  be written, to the server sending its event (the ``added_ms`` of each ``word`` event); its p50/p95
  are over all words of all clients;
- *client latency* of a word: from the moment the audio the word needed was due (a real-time client:
  when the frame whose end reaches the word's ``start_ms`` had been spoken) to the client receiving the
  word (:class:`~mmst.serve.client.ClientLatency`, :attr:`~mmst.serve.client.StreamResult.lags_ms`): what
  the added latency leaves out (websockets' buffers, the wait for the event loop, the network, a send
  that had to wait) is in it; its p50/p95 are over all words of all clients;
- *send lateness* of a frame: how long after its due time the client sent it (the clients' own share of
  the client latency: a server that reads slowly, or clients short of CPU);
- *RTF* of a client: compute seconds the server spent on its stream / seconds of its audio (the
  ``summary`` event); the server's load is their sum (its compute thread's share of real time);
- *words per second*: words of all clients / wall seconds of the run.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import numpy as np

from .client import StreamResult, stream_audio


async def run_clients(url: str, audios: list[np.ndarray], *, frame_ms: float = 100.0, realtime: bool = True,
                      stagger_ms: float = 0.0, sample_format: str = "int16") -> tuple[list[StreamResult], float]:
    """Stream ``audios[i]`` (float32, 16 kHz) from client ``i``, all at once (client ``i`` starts
    ``i * stagger_ms`` later); returns ``(results, wall seconds)``."""

    async def one(i: int, x: np.ndarray) -> StreamResult:
        await asyncio.sleep(i * stagger_ms / 1000.0)
        return await stream_audio(url, x, 16000, frame_ms=frame_ms, realtime=realtime, sample_format=sample_format)

    t = time.monotonic()
    results = await asyncio.gather(*(one(i, x) for i, x in enumerate(audios)))
    return list(results), time.monotonic() - t


def summarize_clients(results: list[StreamResult], wall_s: float) -> dict:
    """Added and client latency p50/p95 over all words, send lateness p95/max over all frames, per-client RTF
    (max, mean), words, words/s, failures (a client closed other than with 1000, or without a summary).

    Raises:
        ValueError: no client result.
    """
    if not results:
        raise ValueError("no client results")
    added = np.asarray([w["added_ms"] for r in results for w in r.words if "added_ms" in w], dtype=np.float64)
    lags = np.asarray([x for r in results for x in r.lags_ms], dtype=np.float64)
    lags = lags[np.isfinite(lags)]
    late = np.asarray([x for r in results for x in r.send_late_ms], dtype=np.float64)
    rtfs = [r.summary["rtf"] for r in results if r.summary and r.summary.get("rtf") is not None]
    n_words = sum(len(r.words) for r in results)
    return {
        "clients": len(results),
        "failed": sum(r.close_code != 1000 or r.summary is None for r in results),
        "words": n_words,
        "words_per_s": n_words / wall_s if wall_s > 0 else None,
        "added_latency_ms_p50": float(np.percentile(added, 50)) if added.size else None,
        "added_latency_ms_p95": float(np.percentile(added, 95)) if added.size else None,
        "added_latency_ms_max": float(added.max()) if added.size else None,
        "client_latency_ms_p50": float(np.percentile(lags, 50)) if lags.size else None,
        "client_latency_ms_p95": float(np.percentile(lags, 95)) if lags.size else None,
        "send_late_ms_p95": float(np.percentile(late, 95)) if late.size else None,
        "send_late_ms_max": float(late.max()) if late.size else None,
        "rtf_max": max(rtfs) if rtfs else None,
        "rtf_mean": float(np.mean(rtfs)) if rtfs else None,
        "audio_s": sum(r.summary["audio_ms"] for r in results if r.summary) / 1000.0,
        "wall_s": wall_s,
    }


#: The per-run numbers of a load point that :func:`repeated_point` reduces to a median and a spread.
REPEATED_KEYS = ("client_latency_ms_p50", "client_latency_ms_p95", "added_latency_ms_p50", "added_latency_ms_p95",
                 "send_late_ms_p95", "rtf_max", "server_cpu_pct", "cpu_s_per_audio_s", "clients_cpu_s",
                 "peak_rss_mib", "words_per_s")


def spread(values) -> dict | None:
    """``{"median", "min", "max", "n"}`` of the numbers in ``values`` (``None`` entries left out); ``None`` when
    there is none. The median of an even count is the mean of the middle two (:func:`statistics.median`)."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def repeated_point(reps: list[dict], p95_limit_ms: float) -> dict:
    """One load point run ``len(reps)`` times (each a :func:`summarize_clients` row): the :func:`spread` of
    every key of :data:`REPEATED_KEYS`, the failed clients of all runs, and whether the point is real time.

    Real time, as the clients see it (``realtime``): no client failed in any run, every client of every run
    computed faster than its audio (RTF < 1), and the median over runs of the client-measured p95 latency
    is below ``p95_limit_ms``. ``realtime_added_p95``: the same with the server's added latency instead.

    Raises:
        ValueError: no run.
    """
    if not reps:
        raise ValueError("a load point needs at least one run")
    out = {k: spread(r.get(k) for r in reps) for k in REPEATED_KEYS}
    out["failed"] = sum(r["failed"] for r in reps)
    keeps_up = out["failed"] == 0 and all(r.get("rtf_max") is not None and r["rtf_max"] < 1.0 for r in reps)

    def below(key: str) -> bool:
        s = out[key]
        return bool(keeps_up and s is not None and s["median"] < p95_limit_ms)

    out["realtime"] = below("client_latency_ms_p95")
    out["realtime_added_p95"] = below("added_latency_ms_p95")
    return out


def max_realtime_clients(points: dict[int, bool]) -> int:
    """The largest number of clients N such that every measured load point up to N is real time
    (``points``: clients -> real time); 0 when the smallest is not. A point that fails bounds the answer
    even when a larger one passes (a lucky run does not lift the figure)."""
    best = 0
    for n in sorted(points):
        if not points[n]:
            break
        best = n
    return best
