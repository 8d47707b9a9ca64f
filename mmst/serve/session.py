"""Per-connection translation state: resampling, the long-form driver, receive-time bookkeeping.

A :class:`StreamSession` owns everything one audio stream needs (a
:class:`~mmst.simultaneous.longform.LongFormTranslator` with its own VAD, decoder caches and encoder
state; a soxr resampler; optionally the received PCM) and nothing shared but the read-only model, so
dropping the session frees the stream. It does no I/O: the server feeds it audio with
:meth:`StreamSession.add_audio`, the scheduler (:mod:`mmst.serve.batching`) runs :meth:`step` /
:meth:`finish` off the event loop, and the events come back as protocol dicts
(:mod:`mmst.serve.protocol`).

Added latency (the server's own delay on a word): a word written at source time ``t`` ms could be
written once the audio frame that brought the stream past ``t`` had arrived; its added latency is the
time from receiving that frame to sending the word's event (see :meth:`StreamSession.recv_time_for`).

Memory per stream does not grow with the number of frames or the length of the stream: frames shorter
than :data:`MARK_MIN_SAMPLES` are merged (in the queue and in the receive-time marks), a word's mark
and those before it are dropped once it is sent (the driver's words never go back in time), marks more
than :data:`MARK_KEEP_S` of audio behind the computed audio are dropped, and the added latencies kept
for the summary are the last :data:`LATENCY_WORDS`.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from mmst.models.stacked import Steps, run_alone, steps_of
from mmst.simultaneous.longform import LongFormWord, SegmentEnd

from .limits import IDLE_MIN_AUDIO_MS, PaceBucket
from .protocol import MODEL_SAMPLE_RATE, StartRequest, segment_end_event, word_event

#: 16 kHz samples under which a received frame is merged with the frame before it (10 ms)
MARK_MIN_SAMPLES = 160
#: seconds of audio behind the computed audio for which receive times are kept
MARK_KEEP_S = 30.0
#: the most recent words whose added latency the summary's percentiles cover
LATENCY_WORDS = 10000


class StreamSession:
    """Translation state of one connection.

    Args:
        driver: a long-form translator: ``push(samples (n,) float32 16 kHz) -> [events]``,
            ``finish() -> [events]`` (events are ``LongFormWord`` / ``SegmentEnd``).
        request: the client's validated ``start`` message.
        save_path: write the received 16 kHz float32 PCM to this wav, incrementally as the compute
            takes it (the file is ``<save_path>.part`` until :meth:`close_save` renames it; None = keep
            nothing).
        clock: monotonic clock in seconds (tests pass a fake one).
        max_ahead_s: the pace's burst (``--max-ahead-s``): seconds of audio the stream may be ahead of
            its declared rate (:class:`~mmst.serve.limits.PaceBucket`).

    Attributes:
        t_start: clock time of the ``start`` message (the session's creation): the origin of pacing.
        t0: clock time of the first audio frame (None before it).
        received_s: seconds of audio received (at the client's rate, before resampling).
        last_audio_t: clock time at which the audio received since the previous reset reached
            :data:`~mmst.serve.limits.IDLE_MIN_AUDIO_MS` (or of ``start``), for the idle timeout.
        pace: the stream's :class:`~mmst.serve.limits.PaceBucket`.
        latencies_ms: added latency of the last :data:`LATENCY_WORDS` words sent (filled by the
            server's sender).
    """

    def __init__(self, driver: Any, request: StartRequest, save_path: str | Path | None = None,
                 clock=time.monotonic, max_ahead_s: float = 10.0) -> None:
        self.driver = driver
        self.request = request
        self.clock = clock
        self.save_path = Path(save_path) if save_path is not None else None
        self._resampler = None
        if request.sample_rate != MODEL_SAMPLE_RATE:
            import soxr

            self._resampler = soxr.ResampleStream(request.sample_rate, MODEL_SAMPLE_RATE, 1, dtype="float32")
        self._lock = threading.Lock()  # pending audio: appended on the event loop, taken by the scheduler
        self._pending: list[np.ndarray] = []
        self._ended = False
        self.finished = False
        self.t0: float | None = None
        self.n_samples = 0  # 16 kHz samples received (after resampling)
        self._mark_samples: list[int] = []  # per received frame: samples received up to its end
        self._mark_times: list[float] = []  # per received frame: its receive time (clock)
        self._mark_start = 0  # samples received before the last mark's first frame
        self._taken = 0  # 16 kHz samples taken by the compute
        self._save_file = None  # soundfile.SoundFile, opened on the first write
        self.t_start = clock()
        self.last_audio_t = self.t_start
        self._idle_audio_s = 0.0  # audio since the idle clock was last reset
        self.pace = PaceBucket(request.rate, max_ahead_s, self.t_start)
        self._in_samples = 0  # samples received at the client's rate
        self.compute_s = 0.0
        self.words: dict[str, int] = {lang: 0 for lang in request.langs}
        self.segments = 0
        self.latencies_ms: deque[float] = deque(maxlen=LATENCY_WORDS)

    # ------------------------------------------------------------------ event-loop side
    def add_audio(self, samples: np.ndarray, recv_time: float | None = None) -> None:
        """Queue float32 samples at the client's rate (resampled to 16 kHz here).

        Raises:
            ValueError: audio after :meth:`end`.
        """
        if self._ended:
            raise ValueError("audio after end")
        t = self.clock() if recv_time is None else recv_time
        if self.t0 is None:
            self.t0 = t
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        self._idle_audio_s += x.size / self.request.sample_rate
        if self._idle_audio_s * 1000.0 >= IDLE_MIN_AUDIO_MS - 1e-9:
            self.last_audio_t, self._idle_audio_s = t, 0.0
        self._in_samples += x.size
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x)
        self._queue(x, t)

    def _queue(self, x: np.ndarray, recv_time: float | None) -> None:
        """Queue 16 kHz samples; mark the frame's end and receive time (None: no new frame). A frame
        shorter than :data:`MARK_MIN_SAMPLES` joins the previous queued array and the previous mark when
        those are short too (the mark keeps the earlier receive time)."""
        small = x.size < MARK_MIN_SAMPLES
        with self._lock:
            if x.size:
                if small and self._pending and self._pending[-1].size < MARK_MIN_SAMPLES:
                    self._pending[-1] = np.concatenate([self._pending[-1], x])
                else:
                    self._pending.append(x)
            self.n_samples += x.size
            if recv_time is None:
                return
            if small and self._mark_samples and self._mark_samples[-1] - self._mark_start < MARK_MIN_SAMPLES:
                self._mark_samples[-1] = self.n_samples
            else:
                self._mark_start = self._mark_samples[-1] if self._mark_samples else 0
                self._mark_samples.append(self.n_samples)
                self._mark_times.append(recv_time)

    def end(self) -> None:
        """The client sent ``end``: flush the resampler; the next scheduler run finishes the stream."""
        if self._ended:
            return
        if self._resampler is not None:
            self._queue(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True), None)
        self._ended = True

    @property
    def ended(self) -> bool:
        """True once the client sent ``end``."""
        return self._ended

    @property
    def received_s(self) -> float:
        """Seconds of audio received so far."""
        return self._in_samples / self.request.sample_rate

    def ahead_s(self, now: float | None = None) -> float:
        """How far the received audio is ahead of the declared pace, in seconds (0 on pace or behind:
        credit saved while silent is capped; the server refuses a frame past ``--max-ahead-s``)."""
        return self.pace.ahead_s(self.clock() if now is None else now)

    def marks(self) -> int:
        """Receive-time marks held (bounded: see the module docstring)."""
        with self._lock:
            return len(self._mark_samples)

    def queued_arrays(self) -> int:
        """Arrays in the queue of audio not yet computed (bounded by its samples)."""
        with self._lock:
            return len(self._pending)

    def has_work(self) -> bool:
        """Audio is waiting, or the stream ended and is not finished yet."""
        return bool(self._pending) or (self._ended and not self.finished)

    def recv_time_for(self, time_ms: float) -> float:
        """Clock time at which the audio up to source time ``time_ms`` had been received: the receive
        time of the first frame whose end reaches ``time_ms`` (the last frame's when none does)."""
        need = int(np.ceil(time_ms * MODEL_SAMPLE_RATE / 1000.0 - 1e-6))
        with self._lock:
            i = bisect_left(self._mark_samples, need)
            if not self._mark_times:
                return self.clock()
            return self._mark_times[min(i, len(self._mark_times) - 1)]

    def _drop_marks(self, keep_from: int) -> None:
        """Forget the marks before index ``keep_from`` (never the last one). Lock held."""
        n = min(keep_from, len(self._mark_samples) - 1)
        if n > 0:
            del self._mark_samples[:n]
            del self._mark_times[:n]

    # ------------------------------------------------------------------ compute side (scheduler thread)
    def take_pending(self, max_frames: int | None = None, max_samples: int | None = None) -> np.ndarray:
        """The queued 16 kHz samples, oldest first, concatenated and removed from the queue (empty when
        none): all of them, or at most ``max_frames`` received frames and at most ``max_samples`` samples
        (a frame longer than that is split; its rest stays queued). Taken samples are appended to the
        ``save_path`` wav."""
        with self._lock:
            n = len(self._pending) if max_frames is None else max_frames
            parts, self._pending = self._pending[:n], self._pending[n:]
            if max_samples is not None:
                kept, total = [], 0
                for i, p in enumerate(parts):
                    room = max_samples - total
                    if p.size > room:
                        if room > 0:
                            kept.append(p[:room])
                        self._pending = ([p[room:]] if room > 0 else [p]) + parts[i + 1:] + self._pending
                        break
                    kept.append(p)
                    total += p.size
                parts = kept
            self._taken += sum(p.size for p in parts)
            # receive times of audio far behind the computed audio are never asked again
            self._drop_marks(bisect_left(self._mark_samples, self._taken - int(MARK_KEEP_S * MODEL_SAMPLE_RATE)))
        if not parts:
            return np.zeros(0, np.float32)
        x = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self._write_saved(x)
        return x

    def pending_samples(self) -> int:
        """16 kHz samples queued and not yet computed."""
        with self._lock:
            return sum(p.size for p in self._pending)

    def step(self, samples: np.ndarray | None = None, max_samples: int | None = None) -> list[dict]:
        """Push ``samples`` (default: everything queued) through the driver, every model call on its
        own; finish the stream when the client ended it and nothing is left. Returns protocol events
        (``word`` events carry an extra ``_recv_t`` key, the receive time used for the added latency,
        which the server strips). Its duration is added to :attr:`compute_s`."""
        t = time.perf_counter()
        try:
            return run_alone(self.step_steps(samples, max_samples))
        finally:
            self.compute_s += time.perf_counter() - t

    def step_steps(self, samples: np.ndarray | None = None, max_samples: int | None = None) -> Steps:
        """:meth:`step` as a generator of compute requests (:mod:`mmst.models.stacked`), for a scheduler
        that stacks the requests of several sessions (it adds this session's share of the compute to
        :attr:`compute_s`); same value as :meth:`step`. ``max_samples`` bounds the queued audio taken
        (the scheduler's per-step bound: a backlog is computed over several steps)."""
        x = self.take_pending(max_samples=max_samples) if samples is None else samples
        events = list((yield from steps_of(self.driver, "push", x))) if x.size else []
        if self._ended and not self._pending and not self.finished:
            events += list((yield from steps_of(self.driver, "finish")))
            self.finished = True
        return [self._to_dict(ev) for ev in events]

    def _to_dict(self, ev: Any) -> dict:
        if isinstance(ev, LongFormWord):
            self.words[ev.lang] = self.words.get(ev.lang, 0) + 1
            d = word_event(ev.lang, ev.text, ev.segment, ev.time_ms, 0.0)
            d["_recv_t"] = self.recv_time_for(ev.time_ms)
            with self._lock:  # later words are not earlier (LongFormTranslator's contract)
                need = int(np.ceil(ev.time_ms * MODEL_SAMPLE_RATE / 1000.0 - 1e-6))
                self._drop_marks(bisect_left(self._mark_samples, need))
            return d
        if isinstance(ev, SegmentEnd):
            self.segments += 1
            return segment_end_event(ev.segment, ev.start_ms, ev.end_ms)
        raise TypeError(f"unknown long-form event {type(ev).__name__}")

    # ------------------------------------------------------------------ end
    def summary(self) -> dict:
        """The ``summary`` event: words per language, segments, audio and compute time, real-time
        factor (compute / audio) and this stream's added latency p50/p95 (ms; None without words)."""
        audio_ms = self.n_samples * 1000.0 / MODEL_SAMPLE_RATE
        lat = np.asarray(self.latencies_ms, dtype=np.float64)
        pct = ({"p50": round(float(np.percentile(lat, 50)), 1), "p95": round(float(np.percentile(lat, 95)), 1)}
               if lat.size else {"p50": None, "p95": None})
        return {"type": "summary", "words": dict(self.words), "segments": self.segments,
                "audio_ms": round(audio_ms, 1), "compute_ms": round(self.compute_s * 1000.0, 1),
                "rtf": round(self.compute_s * 1000.0 / audio_ms, 4) if audio_ms else None,
                "added_latency_ms": pct, "untranslated_speech_share": self.untranslated_speech_share()}

    def untranslated_speech_share(self) -> dict[str, float | None]:
        """Per language, the driver's untranslated speech / speech of the closed segments (rounded to 4 places;
        None without speech; docs/longform.md); ``{}`` for a driver that does not measure it."""
        share = getattr(self.driver, "untranslated_speech_share", None)
        return {lang: (None if v is None else round(v, 4)) for lang, v in (share() if share else {}).items()}

    def _write_saved(self, x: np.ndarray) -> None:
        """Append ``x`` (16 kHz float32) to ``<save_path>.part`` (opened on the first call)."""
        if self.save_path is None:
            return
        if self._save_file is None:
            import soundfile as sf

            self.save_path.parent.mkdir(parents=True, exist_ok=True)
            self._save_file = sf.SoundFile(self._part_path(), "w", MODEL_SAMPLE_RATE, 1, subtype="FLOAT",
                                           format="WAV")
        if x.size:
            self._save_file.write(x)
            self._save_file.flush()

    def _part_path(self) -> Path:
        return self.save_path.with_name(self.save_path.name + ".part")

    def close_save(self) -> Path | None:
        """Write what is still queued to the saved wav, close it and rename ``<save_path>.part`` to
        ``save_path`` (float32 wav, exactly the received samples); returns the path (None when not saving).
        Call after the last step of the session."""
        if self.save_path is None:
            return None
        self.take_pending()  # the audio never computed (a client that left) is kept too
        self._write_saved(np.zeros(0, np.float32))
        self._save_file.close()
        self._part_path().replace(self.save_path)
        return self.save_path
