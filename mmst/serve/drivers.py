"""Long-form drivers for the server's streams, recycled between connections.

Building a stream's driver costs more than a short stream's compute (a
:class:`~mmst.simultaneous.joint.StreamingTranslator` with its caches, a VAD segmenter).
:class:`DriverPool` keeps the drivers of closed streams, reset, and hands them to new ones with the
same languages, so the number of drivers never exceeds the number of streams open at once and a
reconnecting client costs no allocation. All drivers share one Silero VAD model (each segmenter keeps
its own recurrent state), which also lets the scheduler stack their VAD windows into one call.
"""

from __future__ import annotations

import threading
from typing import Any


class DriverPool:
    """Makes and recycles :class:`~mmst.simultaneous.longform.LongFormTranslator` s.

    Args:
        system: a loaded :class:`mmst.evaluation.loading.EvalSystem`.
        policy: ``{lang: policy}`` for every served language (``PolicySpec`` or ``"name:k=v"``).
        beam, max_len_b: translator options (see ``StreamingTranslator``).
        vad: :class:`~mmst.simultaneous.vad.StreamingVad` keyword arguments (``threshold``,
            ``min_silence_ms``, ``speech_pad_ms``, ``max_segment_s``); chunk_ms: the driver's processing
            chunk (ms).
        vad_model: the Silero model every driver's segmenter uses (default: loaded on first use).

    ``pool(langs)`` returns a driver for those languages; ``pool.release(driver)`` resets it and keeps
    it for the next stream (call it only when no step of that driver is running).
    """

    def __init__(self, system: Any, policy: dict, *, beam: int = 1, max_len_b: int = 200,
                 vad: dict | None = None, chunk_ms: float = 320.0, vad_model: Any = None) -> None:
        self.system = system
        self.policy = dict(policy)
        self.beam, self.max_len_b = int(beam), int(max_len_b)
        self.vad = dict(vad or {})
        self.max_segment_s = float(self.vad.get("max_segment_s", 20.0))
        self.chunk_ms = float(chunk_ms)
        self.vad_model = vad_model
        self._free: dict[tuple[str, ...], list[Any]] = {}
        self._lock = threading.Lock()
        self.created = 0

    def __call__(self, langs: list[str]) -> Any:
        """A reset driver decoding ``langs`` (recycled when one is free)."""
        key = tuple(langs)
        with self._lock:
            free = self._free.get(key)
            if free:
                return free.pop()
        from mmst.simultaneous.longform import LongFormTranslator
        from mmst.simultaneous.vad import StreamingVad, load_vad_model

        tr = self.system.translator(tgt_langs=list(langs), policy={lang: self.policy[lang] for lang in langs},
                                    beam=self.beam, max_len_b=self.max_len_b)
        with self._lock:
            if self.vad_model is None:
                self.vad_model = load_vad_model()
        driver = LongFormTranslator(tr, vad=StreamingVad(**self.vad, model=self.vad_model),
                                    max_segment_s=self.max_segment_s, chunk_ms=self.chunk_ms)
        driver._mmst_langs = key
        with self._lock:
            self.created += 1
        return driver

    def release(self, driver: Any) -> None:
        """Reset ``driver`` (a new stream from scratch) and keep it for reuse."""
        driver.reset()
        with self._lock:
            self._free.setdefault(driver._mmst_langs, []).append(driver)

    def idle(self) -> int:
        """Drivers waiting for a stream."""
        with self._lock:
            return sum(len(v) for v in self._free.values())
