"""Simulated clients for load measurements of mmst-serve (used by ``bench/bench_serve.py``).

Definitions (docs/serving.md):

- *added latency* of a word: from the server receiving the audio frame after which the word could
  be written, to the server sending its event (the ``added_ms`` of each ``word`` event); its p50/p95
  are over all words of all clients;
- *client latency* of a word: from the client sending the frame whose end reaches the word's
  ``start_ms`` to the client receiving the word (:attr:`~mmst.serve.client.StreamResult.lags_ms`): what
  the added latency leaves out (websockets' buffers, the wait for the event loop, the network) is in it;
- *RTF* of a client: compute seconds the server spent on its stream / seconds of its audio (the
  ``summary`` event); the server's load is their sum (its compute thread's share of real time);
- *words per second*: words of all clients / wall seconds of the run.
"""

from __future__ import annotations

import asyncio
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
    """Added and client latency p50/p95 over all words, per-client RTF (max, mean), words, words/s, failures.

    Raises:
        ValueError: no client result.
    """
    if not results:
        raise ValueError("no client results")
    added = np.asarray([w["added_ms"] for r in results for w in r.words if "added_ms" in w], dtype=np.float64)
    lags = np.asarray([x for r in results for x in r.lags_ms], dtype=np.float64)
    lags = lags[np.isfinite(lags)]
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
        "rtf_max": max(rtfs) if rtfs else None,
        "rtf_mean": float(np.mean(rtfs)) if rtfs else None,
        "audio_s": sum(r.summary["audio_ms"] for r in results if r.summary) / 1000.0,
        "wall_s": wall_s,
    }
