"""Causal peak gain: the optional level normalisation of a DATA (``fbank.peak_normalize``).

A running-peak gain that uses only past samples, so data prep (whole clips) and the streaming front end
(chunks of any size) scale the same samples identically, bit for bit. It acts on waveforms (float in
[-1, 1]) before :mod:`mmst.features` computes fbank.
"""

from __future__ import annotations

import numpy as np

PEAK_GAIN_FLOOR = 1e-3
"""Smallest running peak :class:`CausalPeakGain` divides by (-60 dBFS): the gain never exceeds
``target / PEAK_GAIN_FLOOR``, so digital silence and hiss are not blown up to full scale."""
QUIET_PEAK = 0.01
"""Peak amplitude (-40 dBFS, about 330 LSB in 16-bit units) below which an input is reported as very
quiet: its features sit far below those of normally levelled speech."""


class CausalPeakGain:
    """Causal peak normalisation: scale each sample by ``target / max(running peak, floor)``.

    Peak-normalising a whole clip (``x * target / max|x|``) needs the clip's future, so a streaming
    front end cannot apply it.  This rule only uses the past: for sample ``t``,

        ``p_t = max(floor, |x_0|, ..., |x_t|)``,  ``y_t = x_t * target / p_t``

    so ``|y_t| <= target`` always, the gain never increases, and once the loudest sample of the
    clip has arrived the gain is exactly the whole-clip gain.  It depends on nothing but the samples
    seen so far, so feeding a clip in chunks of any size gives the same output, bit for bit, as
    one call on the whole clip: data prep (whole utterances), the evaluation and the SimulEval agent
    (chunks) compute identical features.

    Args:
        target: peak amplitude in (0, 1] the output is scaled to (``fbank.peak_normalize``).
        floor: smallest running peak divided by (see :data:`PEAK_GAIN_FLOOR`).

    Raises:
        ValueError: ``target`` outside (0, 1] or ``floor <= 0``.
    """

    def __init__(self, target: float, floor: float = PEAK_GAIN_FLOOR) -> None:
        if not 0.0 < float(target) <= 1.0:
            raise ValueError(f"peak_normalize target must be in (0, 1], got {target!r}")
        if not float(floor) > 0.0:
            raise ValueError(f"peak gain floor must be > 0, got {floor!r}")
        self.target = float(target)
        self.floor = float(floor)
        self.peak = 0.0
        """Running peak ``max|x|`` of the input so far (without the floor)."""

    def reset(self) -> None:
        """Forget the running peak (next utterance)."""
        self.peak = 0.0

    def __call__(self, samples: np.ndarray) -> np.ndarray:
        """Scale the next chunk.

        Args:
            samples: float ``(N,)`` in [-1, 1], the continuation of the samples already seen.

        Returns:
            float32 ``(N,)``.
        """
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        if x.size == 0:
            return x.copy()
        run = np.maximum.accumulate(np.abs(x))
        np.maximum(run, np.float32(self.peak), out=run)
        self.peak = float(run[-1])
        np.maximum(run, np.float32(self.floor), out=run)
        return (x * (np.float32(self.target) / run)).astype(np.float32, copy=False)


def causal_peak_normalize(waveform: np.ndarray, target: float, floor: float = PEAK_GAIN_FLOOR) -> np.ndarray:
    """:class:`CausalPeakGain` applied to a whole utterance (what the data prep stores).

    Args:
        waveform: float ``(N,)`` in [-1, 1].
        target: output peak in (0, 1].
        floor: see :data:`PEAK_GAIN_FLOOR`.

    Returns:
        float32 ``(N,)``, equal to streaming the same samples through :class:`CausalPeakGain`.

    Raises:
        ValueError: see :class:`CausalPeakGain`.
    """
    return CausalPeakGain(target, floor)(waveform)
