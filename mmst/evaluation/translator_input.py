"""What a translator's input gets before its fbank so that its features are the DATA's: the fbank dither
(:class:`FeatureMatchedTranslator`) and the causal peak gain (:class:`PeakGainTranslator`), both applied
to the waveform; :func:`reset_translator` starts an utterance on any translator.

:meth:`mmst.evaluation.bundle.ModelBundle.translator` wraps its translators in them, so the evaluation,
the SimulEval agent and ``mmst-serve`` stream the same features.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import numpy as np

from mmst.features import KALDI_INT16_SCALE, Dither, dither_seed_for
from mmst.models.stacked import steps_of

logger = logging.getLogger("mmst.evaluation.loading")


def reset_translator(translator: Any, utt_id: str | None = None) -> None:
    """``translator.reset(utt_id)`` when ``reset`` takes an utterance id (dither seed), else ``reset()``."""
    try:
        takes_id = len(inspect.signature(translator.reset).parameters) >= 1
    except (TypeError, ValueError):
        takes_id = False
    if takes_id and utt_id is not None:
        translator.reset(utt_id)
    else:
        translator.reset()


class FeatureMatchedTranslator:
    """Adds the DATA's fbank dither to the waveform before a translator whose front end has none.

    ``mmst.features.OnlineFbank(dither=d, dither_mode=m)`` adds ``N(0, d)`` (16-bit units) to every
    sample (``all``) or to samples with ``|x| < 0.5`` LSB (``silence``, what the data prep uses: espeak
    audio has exact digital zeros).  Adding ``N(0, d) / 32768`` to the same float samples before the
    translator's dither-free fbank gives the same features; with ``reset(utt_id)`` the noise is drawn
    from ``dither_seed_for(utt_id)`` like the prep, so they match the DATA's up to float rounding.
    Every other attribute is the wrapped translator's.

    Args:
        inner: a translator with ``reset()`` and ``accept_audio(samples, finished)``.
        dither: std in 16-bit units (> 0).
        dither_mode: ``"silence"`` or ``"all"``.
    """

    def __init__(self, inner: Any, dither: float, dither_mode: str = "silence") -> None:
        self.inner = inner
        self.dither = float(dither)
        self.dither_mode = dither_mode
        self._dither = Dither(self.dither, dither_mode, 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def reset(self, utt_id: str | None = None) -> None:
        """Reset the translator; seed the dither from ``utt_id`` (CRC32, as the data prep) or 0."""
        self._dither.reseed(dither_seed_for(utt_id) if utt_id is not None else 0)
        self.inner.reset()

    def accept_audio(self, samples: np.ndarray, finished: bool = False) -> Any:
        """Dither ``samples`` (float32 16 kHz) like the DATA's fbank, then feed the translator."""
        return self.inner.accept_audio(self._dithered(samples), finished=finished)

    def accept_audio_steps(self, samples: np.ndarray, finished: bool = False) -> Any:
        """:meth:`accept_audio` as a generator of compute requests (:mod:`mmst.models.stacked`)."""
        return steps_of(self.inner, "accept_audio", self._dithered(samples), finished=finished)

    def _dithered(self, samples: np.ndarray) -> np.ndarray:
        x = np.array(samples, dtype=np.float32, copy=True).reshape(-1)
        if x.size:
            x = self._dither(x * np.float32(KALDI_INT16_SCALE)) / np.float32(KALDI_INT16_SCALE)
        return x


class PeakGainTranslator:
    """Applies the DATA's causal peak gain (:class:`mmst.features.CausalPeakGain`) before a translator.

    The gain state is per utterance (cleared by :meth:`reset`).  When the utterance ends
    (``finished=True``) an input whose peak stayed below :data:`mmst.features.QUIET_PEAK` is reported
    with a warning (the gain is capped at ``target / PEAK_GAIN_FLOOR``, so its features stay far from
    the training data's).  Every other attribute is the wrapped translator's.

    Args:
        inner: a translator with ``reset()`` and ``accept_audio(samples, finished)``.
        target: the DATA's ``fbank.peak_normalize`` (peak in (0, 1]).

    Raises:
        ValueError: ``target`` outside (0, 1].
    """

    def __init__(self, inner: Any, target: float) -> None:
        from mmst.gain import CausalPeakGain

        self.inner = inner
        self.gain = CausalPeakGain(target)
        self._n = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def reset(self, utt_id: str | None = None) -> None:
        """Reset the gain and the wrapped translator (``utt_id`` passed on when it takes one)."""
        self.gain.reset()
        self._n = 0
        reset_translator(self.inner, utt_id)

    def accept_audio(self, samples: np.ndarray, finished: bool = False) -> Any:
        """Scale ``samples`` (float32, 16 kHz, continuing the utterance), then feed the translator."""
        return self.inner.accept_audio(self._scaled(samples, finished), finished=finished)

    def accept_audio_steps(self, samples: np.ndarray, finished: bool = False) -> Any:
        """:meth:`accept_audio` as a generator of compute requests (:mod:`mmst.models.stacked`)."""
        return steps_of(self.inner, "accept_audio", self._scaled(samples, finished), finished=finished)

    def _scaled(self, samples: np.ndarray, finished: bool) -> np.ndarray:
        from mmst.gain import QUIET_PEAK

        x = self.gain(samples)
        self._n += x.size
        if finished and self._n and self.gain.peak < QUIET_PEAK:
            logger.warning(
                "very quiet input (peak %.1e, %.0f dBFS, below %.0f dBFS): gain capped at %.0f, "
                "features are far from the training data's; check the recording level",
                self.gain.peak, 20 * np.log10(max(self.gain.peak, 1e-12)), 20 * np.log10(QUIET_PEAK),
                self.gain.target / self.gain.floor,
            )
        return x
