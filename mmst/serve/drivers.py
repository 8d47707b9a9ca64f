"""Long-form drivers for the server's streams, recycled between connections.

Building a stream's driver costs more than a short stream's compute (a
:class:`~mmst.simultaneous.joint.StreamingTranslator` with its caches, a VAD segmenter).
:class:`DriverPool` keeps the drivers of closed streams, reset, and hands them to new ones with the
same SET of languages (a driver decodes its languages in sorted order, whatever order a client asked
them in), so the number of drivers never exceeds the number of streams open at once and a
reconnecting client costs no allocation; at most ``max_idle`` drivers wait, the others are dropped. All drivers share one Silero VAD model (each segmenter keeps
its own recurrent state), which also lets the scheduler stack their VAD windows into one call.
"""

from __future__ import annotations

import threading
from typing import Any


class DriverPool:
    """Makes and recycles :class:`~mmst.simultaneous.longform.LongFormTranslator` s.

    Args:
        bundle: the loaded model (:func:`mmst.evaluation.bundle.load_bundle`).
        policy: ``{lang: policy}`` for every served language (``PolicySpec`` or ``"name:k=v"``).
        beam, max_len_b: translator options (see ``StreamingTranslator``).
        vad: :class:`~mmst.simultaneous.vad.StreamingVad` keyword arguments (``threshold``,
            ``min_silence_ms``, ``speech_pad_ms``, ``max_segment_s``); chunk_ms: the driver's processing
            chunk (ms).
        vad_model: the Silero model every driver's segmenter uses (default: loaded on first use).
        max_idle: most drivers kept for reuse (over all language sets; the oldest go first).
        restart: the driver's sentence-restart keywords (``restart``, ``restart_min_speech_ms``,
            ``restart_eos_chunks``; :func:`mmst.cli_help.restart_options`); default: the driver's defaults.

    ``pool(langs)`` returns a driver for those languages; ``pool.release(driver)`` resets it and keeps
    it for the next stream (call it only when no step of that driver is running).
    """

    def __init__(self, bundle: Any, policy: dict, *, beam: int = 1, max_len_b: int = 200,
                 vad: dict | None = None, chunk_ms: float = 320.0, vad_model: Any = None,
                 max_idle: int = 8, restart: dict | None = None) -> None:
        self.bundle = bundle
        self.policy = dict(policy)
        self.beam, self.max_len_b = int(beam), int(max_len_b)
        self.vad = dict(vad or {})
        self.max_segment_s = float(self.vad.get("max_segment_s", 20.0))
        self.chunk_ms = float(chunk_ms)
        self.vad_model = vad_model
        self.max_idle = int(max_idle)
        self.restart = dict(restart or {})
        self._free: list[Any] = []  # idle drivers, oldest first
        self._lock = threading.Lock()
        self.created = 0

    def __call__(self, langs: list[str]) -> Any:
        """A reset driver decoding ``langs`` in sorted order (recycled when one is free)."""
        key = tuple(sorted(set(langs)))
        with self._lock:
            for i in range(len(self._free) - 1, -1, -1):
                if self._free[i]._mmst_langs == key:
                    return self._free.pop(i)
        from mmst.simultaneous.longform import LongFormTranslator
        from mmst.simultaneous.vad import StreamingVad, load_vad_model

        tr = self.bundle.translator(tgt_langs=list(key), policy={lang: self.policy[lang] for lang in key},
                                    beam=self.beam, max_len_b=self.max_len_b)
        with self._lock:
            if self.vad_model is None:
                self.vad_model = load_vad_model()
        driver = LongFormTranslator(tr, vad=StreamingVad(**self.vad, model=self.vad_model),
                                    max_segment_s=self.max_segment_s, chunk_ms=self.chunk_ms, measure_state=False,
                                    **self.restart)
        driver._mmst_langs = key
        with self._lock:
            self.created += 1
        return driver

    def release(self, driver: Any) -> None:
        """Reset ``driver`` (a new stream from scratch) and keep it for reuse (dropping the oldest idle
        driver when ``max_idle`` are already kept)."""
        driver.reset()
        with self._lock:
            self._free.append(driver)
            del self._free[: max(0, len(self._free) - self.max_idle)]

    def idle(self) -> int:
        """Drivers waiting for a stream."""
        with self._lock:
            return len(self._free)
