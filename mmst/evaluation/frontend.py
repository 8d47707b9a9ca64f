"""The audio front end of evaluation and of the SimulEval agent: one reading, one level check.

Both the offline-corpus evaluation (``eval/simultaneous_eval.py``, :mod:`mmst.evaluation.runner`) and
the SimulEval agent (:mod:`mmst.agents`) get their 16 kHz mono float32 samples from here and warn
about empty and silent input the same way; everything after (the DATA's fbank settings, dither and
gain) is the translator's (:meth:`mmst.evaluation.bundle.ModelBundle.translator`).

- :func:`read_utterance_audio`: one manifest utterance (``wav``, ``offset``, ``duration``, seconds),
  decoded, downmixed and resampled by :func:`mmst.audio.load_audio`; unreadable audio gives a warning
  and an empty array (the utterance then gets an empty hypothesis);
- :func:`read_source_file`: a whole file at its native rate, downmixed to mono (the agent's
  dataloader; SimulEval computes delays from the native rate);
- :class:`StreamInput`: chunks at any rate (float or int16-scaled) -> 16 kHz float32 with a streaming
  resampler, and the level of what was seen;
- :func:`check_level`: the empty / silent-input warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from mmst.audio import TARGET_SAMPLE_RATE, AudioError, load_audio

logger = logging.getLogger("mmst.evaluation.frontend")

SILENCE_PEAK = 1e-4
"""Peak amplitude below which an input is reported as silent (-80 dBFS)."""

END_TOLERANCE_S = 0.05
"""A manifest segment may end this many seconds past its audio file (rounded segment times)."""


def check_level(peak: float, n_samples: int, what: str) -> str | None:
    """Warn about an empty or silent input; returns ``"empty"``, ``"silent"`` or ``None``.

    Args:
        peak: ``max |x|`` of the input (float scale).
        n_samples: number of samples seen.
        what: the input's name for the message (utterance id or file).
    """
    if n_samples == 0:
        logger.warning("%s: empty audio (0 samples): empty hypothesis", what)
        return "empty"
    if peak < SILENCE_PEAK:
        logger.warning("%s: silent audio (peak %.1e); translating it anyway", what, peak)
        return "silent"
    return None


def read_utterance_audio(u: dict[str, Any]) -> np.ndarray:
    """Audio of one manifest utterance as 16 kHz mono float32.

    No gain here: the DATA's ``fbank.peak_normalize`` is applied causally, chunk by chunk, by the
    translator (:class:`mmst.evaluation.translator_input.PeakGainTranslator`), exactly as in the SimulEval agent.

    Args:
        u: ``{"id", "wav", "offset", "duration"}`` (seconds; ``duration`` '' or None = to the end).

    Returns:
        float32 ``(N,)``; an empty array (with a warning) when the audio cannot be read.
    """
    try:
        offset = float(u["offset"] or 0.0)
        duration = float(u["duration"]) if u["duration"] not in ("", None) else None
        x = load_audio(u["wav"], offset_s=offset, duration_s=duration, end_tolerance_s=END_TOLERANCE_S)
    except (AudioError, ValueError) as e:
        logger.warning("utterance %s: %s: empty hypothesis", u["id"], e)
        return np.zeros(0, dtype=np.float32)
    if x.size:
        check_level(float(np.abs(x).max()), x.size, f"utterance {u['id']}")
    return x


def read_source_file(path: str | Path) -> tuple[np.ndarray, int]:
    """A whole audio file as float32 mono at its native rate (channels averaged, with a warning).

    Returns:
        ``(samples (N,), sample rate in Hz)``; ``N`` may be 0 (an empty file, with a warning).
    """
    import soundfile

    samples, rate = soundfile.read(path, dtype="float32", always_2d=True)
    if samples.shape[1] > 1:
        logger.warning("%s: %d channels, downmixed to mono", path, samples.shape[1])
    mono = samples.mean(axis=1) if samples.shape[1] > 1 else samples[:, 0]
    if mono.size == 0:
        check_level(0.0, 0, str(path))
    return mono.astype(np.float32), int(rate)


class StreamInput:
    """Converts the chunks of one stream to 16 kHz float32 and tracks its level.

    Args:
        input_scale: ``"float"`` (samples in [-1, 1]), ``"int16"`` (int16-scaled floats, divided by
            32768) or ``"auto"`` (int16 from the first chunk with ``|x| > 1``).

    Raises:
        ValueError: unknown ``input_scale``.
    """

    def __init__(self, input_scale: str = "auto") -> None:
        if input_scale not in ("auto", "float", "int16"):
            raise ValueError(f"input_scale must be auto, float or int16, got {input_scale!r}")
        self.input_scale = input_scale
        self.reset()

    def reset(self) -> None:
        """Start a new stream."""
        self._resampler: Any = None
        self._rate: int | None = None
        self._int16 = None if self.input_scale == "auto" else self.input_scale == "int16"
        self.peak = 0.0
        self.n_samples = 0

    def __call__(self, x: np.ndarray, rate: int, finished: bool = False) -> np.ndarray:
        """The next chunk at 16 kHz.

        Args:
            x: float samples ``(n,)`` of the stream at ``rate`` Hz.
            rate: input sample rate in Hz.
            finished: last chunk (flushes the resampler).

        Returns:
            float32 ``(m,)`` at 16 kHz (``m`` ~= ``n * 16000 / rate``, delayed by the resampler).
        """
        x = np.asarray(x, dtype=np.float32)
        if self._int16 is None and x.size and float(np.abs(x).max()) > 1.0:
            self._int16 = True
            logger.info("input samples exceed [-1, 1]: treated as int16-scaled (divided by 32768)")
        if self._int16:
            x = x / np.float32(32768.0)
        if rate != TARGET_SAMPLE_RATE:
            import soxr

            if self._resampler is None or self._rate != rate:
                self._resampler = soxr.ResampleStream(rate, TARGET_SAMPLE_RATE, 1, dtype="float32", quality="HQ")
                self._rate = rate
            x = np.asarray(self._resampler.resample_chunk(x, last=finished), dtype=np.float32)
        if x.size:
            self.peak = max(self.peak, float(np.abs(x).max()))
            self.n_samples += x.size
        return x

    def check_level(self, what: str = "source audio") -> str | None:
        """:func:`check_level` of everything seen since :meth:`reset`."""
        return check_level(self.peak, self.n_samples, what)
