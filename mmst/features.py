"""80-dim Kaldi log-mel filterbank features, offline and streaming.

One code path: :func:`fbank` is :class:`OnlineFbank` fed the whole waveform at once, so offline
features (training, prep) and streaming features (simultaneous evaluation, where audio arrives in
chunks of any size) are the same frames (tested to 1e-4 for chunks of 1, 160, 4000, 16000 samples;
in practice they are bit-identical).

Feature definition (Kaldi ``compute-fbank-feats`` defaults, via ``kaldi-native-fbank``):
25 ms Povey window, 10 ms shift, ``snip_edges=True`` (frame ``t`` covers samples
``[160 t, 160 t + 400)``; a signal of ``N`` samples gives ``1 + (N - 400) // 160`` frames, 0 when
``N < 400``), DC removal, pre-emphasis 0.97, 512-point FFT power spectrum, 80 triangular mel bins
between 20 Hz and Nyquist (Kaldi's mel scale ``1127 ln(1 + f/700)``), natural log floored at
float32 epsilon (:data:`LOG_FLOOR`). Output ``(T, 80)`` float32, 1 frame = 10 ms.

Input scaling: waveforms are floats in [-1, 1] (see :mod:`mmst.audio`); Kaldi fbank expects 16-bit
integer amplitudes, so the samples are multiplied by 32768 **here and only here**
(:data:`KALDI_INT16_SCALE`).

Dither: ``dither`` has Kaldi's meaning and unit (standard deviation of added Gaussian noise in 16-bit
amplitude units; Kaldi's default is 1.0), but unlike Kaldi the noise is added per *sample* of the
signal from a seeded ``numpy`` generator (``dither_seed``), so features are deterministic and the
streaming and offline paths still agree. ``dither=0`` (the default) adds nothing.
``dither_mode="all"`` dithers every sample (Kaldi). ``dither_mode="silence"`` dithers only samples
below 16-bit resolution (``|x| < 0.5 / 32768``, i.e. digital silence), which is what the data prep
uses (``dither=1.0``, seeded by the utterance id): espeak's exact zeros then yield frames at the
level of 1-LSB noise instead of piling up at the log floor and skewing CMVN, while real speech is
left (nearly) untouched. Measured on the 7 FLEURS clips of ../shared/data (peak 0.003-0.8 of full
scale): on the louder half of the frames, Kaldi-style dither changes the log-mel values of the
quiet clips by 0.2-0.73 nats on average, ``"silence"`` mode by 0.00-0.09.

Level and normalisation live beside this module: :mod:`mmst.gain` (the causal peak gain of a DATA's
``fbank.peak_normalize``, applied to waveforms before fbank) and :mod:`mmst.cmvn` (global and
per-utterance CMVN of the features). Their names stay importable from here.
"""

from __future__ import annotations

import array
import zlib
from typing import Any

import kaldi_native_fbank as knf
import numpy as np

# names whose home is mmst.gain / mmst.cmvn, importable from here as before
from mmst.cmvn import CMVNAccumulator as CMVNAccumulator
from mmst.cmvn import GlobalCMVN as GlobalCMVN
from mmst.cmvn import utterance_cmvn as utterance_cmvn
from mmst.gain import PEAK_GAIN_FLOOR as PEAK_GAIN_FLOOR
from mmst.gain import QUIET_PEAK as QUIET_PEAK
from mmst.gain import CausalPeakGain as CausalPeakGain
from mmst.gain import causal_peak_normalize as causal_peak_normalize

NUM_MEL_BINS = 80
"""Feature dimension."""
FRAME_LENGTH_MS = 25.0
"""Analysis window length in ms."""
FRAME_SHIFT_MS = 10.0
"""Frame shift in ms (1 frame = 10 ms)."""
KALDI_INT16_SCALE = 32768.0
"""Factor from float [-1, 1] to Kaldi's 16-bit amplitude scale, applied once in this module."""
LOG_FLOOR = float(np.log(np.finfo(np.float32).eps))
"""Smallest possible log-mel value (log of float32 epsilon, about -15.94): an all-zero frame."""
DITHER_MODES = ("all", "silence")
"""``dither_mode`` values: dither every sample, or only samples below 16-bit resolution."""


def window_samples(sample_rate: int = 16000) -> int:
    """Window length in samples (400 at 16 kHz)."""
    return int(sample_rate * FRAME_LENGTH_MS / 1000)


def shift_samples(sample_rate: int = 16000) -> int:
    """Frame shift in samples (160 at 16 kHz)."""
    return int(sample_rate * FRAME_SHIFT_MS / 1000)


def num_frames(num_samples: int, sample_rate: int = 16000) -> int:
    """Number of fbank frames for ``num_samples`` samples (``snip_edges=True``).

    Returns ``0`` if ``num_samples < 400`` (at 16 kHz), else ``1 + (num_samples - 400) // 160``.
    """
    win, shift = window_samples(sample_rate), shift_samples(sample_rate)
    return 0 if num_samples < win else 1 + (num_samples - win) // shift


def fbank_options(sample_rate: int = 16000) -> knf.FbankOptions:
    """The ``kaldi_native_fbank.FbankOptions`` used everywhere in mmst.

    Kaldi defaults except 80 mel bins and ``dither=0`` inside kaldi-native-fbank (mmst adds its own
    deterministic dither, see module docstring).
    """
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = float(sample_rate)
    opts.frame_opts.frame_length_ms = FRAME_LENGTH_MS
    opts.frame_opts.frame_shift_ms = FRAME_SHIFT_MS
    opts.frame_opts.dither = 0.0
    opts.frame_opts.preemph_coeff = 0.97
    opts.frame_opts.remove_dc_offset = True
    opts.frame_opts.window_type = "povey"
    opts.frame_opts.round_to_power_of_two = True
    opts.frame_opts.snip_edges = True
    opts.mel_opts.num_bins = NUM_MEL_BINS
    opts.mel_opts.low_freq = 20.0
    opts.mel_opts.high_freq = 0.0
    opts.use_energy = False
    opts.use_log_fbank = True
    opts.use_power = True
    return opts


def dither_seed_for(key: str) -> int:
    """Deterministic 32-bit dither seed for a string key (e.g. an utterance id), via CRC32."""
    return zlib.crc32(key.encode("utf-8")) & 0xFFFFFFFF


class Dither:
    """Deterministic Gaussian dither of a sample stream, in Kaldi's 16-bit amplitude units.

    ``mode="all"`` adds ``N(0, std)`` to every sample (Kaldi); ``mode="silence"`` only to samples with
    ``|x| < 0.5`` (digital silence, what the data prep uses). The k-th dithered sample of the stream
    always gets the k-th draw of a generator seeded with ``seed``, so the result does not depend on
    how the stream is cut into chunks. The one dither implementation: :class:`OnlineFbank` and the
    evaluation's :class:`mmst.evaluation.translator_input.FeatureMatchedTranslator` both call it.

    Args:
        std: standard deviation in 16-bit units (> 0).
        mode: one of :data:`DITHER_MODES`.
        seed: generator seed (use :func:`dither_seed_for` on the utterance id).

    Raises:
        ValueError: unknown ``mode`` or ``std <= 0``.
    """

    def __init__(self, std: float, mode: str = "all", seed: int = 0) -> None:
        if mode not in DITHER_MODES:
            raise ValueError(f"dither_mode must be one of {DITHER_MODES}, got {mode!r}")
        if not std > 0:
            raise ValueError(f"dither std must be > 0, got {std}")
        self.std = np.float32(std)
        self.mode = mode
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        """Restart the noise sequence from ``seed`` (next utterance)."""
        self._rng = np.random.default_rng(seed)

    def __call__(self, scaled: np.ndarray) -> np.ndarray:
        """Dither ``scaled`` in place and return it.

        Args:
            scaled: float32 ``(n,)`` samples on the 16-bit scale (``x * 32768``).
        """
        if self.mode == "silence":
            silent = np.abs(scaled) < 0.5
            k = int(np.count_nonzero(silent))
            if k:
                scaled[silent] += self._rng.standard_normal(k, dtype=np.float32) * self.std
        else:
            scaled += self._rng.standard_normal(scaled.size, dtype=np.float32) * self.std
        return scaled


class OnlineFbank:
    """Streaming 80-dim fbank: feed float samples in chunks of any size, pop frames as they are ready.

    Frames are identical to :func:`fbank` on the concatenated input (same code path).

    Args:
        sample_rate: input rate in Hz (16000 in mmst).
        dither: Gaussian dither std in 16-bit units (Kaldi convention); 0 disables.
        dither_seed: seed of the per-sample dither noise (ignored when ``dither == 0``).
        dither_mode: ``"all"`` (Kaldi) or ``"silence"`` (only samples with ``|x| < 0.5 LSB``).

    Raises:
        ValueError: unknown ``dither_mode`` or negative ``dither``.

    Example::

        f = OnlineFbank()
        for chunk in chunks:            # float32 (n,) in [-1, 1]
            f.accept_waveform(chunk)
            new = f.pop_frames()        # (k, 80), possibly k == 0
        f.input_finished()
        tail = f.pop_frames()
    """

    def __init__(self, sample_rate: int = 16000, dither: float = 0.0, dither_seed: int = 0,
                 dither_mode: str = "all") -> None:
        if dither_mode not in DITHER_MODES:
            raise ValueError(f"dither_mode must be one of {DITHER_MODES}, got {dither_mode!r}")
        if dither < 0:
            raise ValueError(f"dither must be >= 0, got {dither}")
        self.sample_rate = int(sample_rate)
        self.dither = float(dither)
        self.dither_mode = dither_mode
        self._dither = Dither(self.dither, dither_mode, dither_seed) if self.dither > 0 else None
        self._knf = knf.OnlineFbank(fbank_options(self.sample_rate))
        self._popped = 0
        self._finished = False

    @property
    def dim(self) -> int:
        """Feature dimension (80)."""
        return NUM_MEL_BINS

    def accept_waveform(self, samples: np.ndarray) -> None:
        """Append samples.

        Args:
            samples: float ``(n,)`` mono samples in [-1, 1] at ``sample_rate`` (``n`` may be 0).

        Raises:
            TypeError: integer samples (scale them with :mod:`mmst.audio` first).
            ValueError: wrong shape, NaN/Inf samples, or input already finished.
        """
        if self._finished:
            raise ValueError("OnlineFbank.accept_waveform called after input_finished()")
        x = np.asarray(samples)
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"OnlineFbank expects float samples in [-1, 1], got dtype {x.dtype}")
        if x.ndim != 1:
            raise ValueError(f"OnlineFbank expects a 1-D (n,) waveform, got shape {x.shape}")
        if x.size == 0:
            return
        if not np.isfinite(x).all():
            raise ValueError("OnlineFbank: waveform contains NaN or Inf")
        scaled = x.astype(np.float32) * np.float32(KALDI_INT16_SCALE)  # the one int16 scaling
        if self._dither is not None:
            self._dither(scaled)
        # pybind converts the samples element by element; array.array("f") is ~25% faster than numpy here
        self._knf.accept_waveform(float(self.sample_rate), array.array("f", scaled.tobytes()))

    def input_finished(self) -> None:
        """Declare the end of input (no effect on frame count with ``snip_edges=True``)."""
        if not self._finished:
            self._knf.input_finished()
            self._finished = True

    @property
    def num_frames_ready(self) -> int:
        """Total frames computed so far, counting frames already popped."""
        return int(self._knf.num_frames_ready)

    @property
    def num_frames_popped(self) -> int:
        """Frames already returned by :meth:`pop_frames`."""
        return self._popped

    def pop_frames(self) -> np.ndarray:
        """Return the frames not yet popped, as float32 ``(n, 80)`` (``n`` may be 0), and free them."""
        ready = self.num_frames_ready
        n = ready - self._popped
        if n <= 0:
            return np.zeros((0, NUM_MEL_BINS), dtype=np.float32)
        get = self._knf.get_frame
        out = np.empty((n, NUM_MEL_BINS), dtype=np.float32)
        for i in range(n):
            out[i] = get(self._popped + i)  # get_frame returns a view into the extractor: copy
        self._knf.pop(n)
        self._popped = ready
        return out


def fbank_kwargs_from_config(data_cfg: dict[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments for :func:`fbank` / :class:`OnlineFbank` that reproduce a DATA's features.

    Args:
        data_cfg: ``DATA/config.yaml`` as a dict (``mmst.data.corpus.load_data_config``), or None.

    Returns:
        ``{"dither": x, "dither_mode": m}`` with the prep's settings (``0.0``/``"all"`` when the config
        has no ``fbank`` section). Pass
        ``dither_seed=dither_seed_for(utterance_id)`` as well for bit-identical features; any seed
        gives statistically identical ones.
    """
    fb = (data_cfg or {}).get("fbank") or {}
    return {"dither": float(fb.get("dither", 0.0) or 0.0), "dither_mode": str(fb.get("dither_mode", "all"))}


def fbank(waveform: np.ndarray, sample_rate: int = 16000, dither: float = 0.0,
          dither_seed: int = 0, dither_mode: str = "all") -> np.ndarray:
    """Compute 80-dim Kaldi log-mel fbank of a whole waveform (the one fbank function of mmst).

    Args:
        waveform: float ``(N,)`` mono samples in [-1, 1] (scaled by 32768 internally).
        sample_rate: rate in Hz (16000).
        dither: Gaussian dither std in 16-bit units; 0 (default) for exact determinism without noise.
        dither_seed: seed of the dither noise (use :func:`dither_seed_for` on the utterance id).
        dither_mode: ``"all"`` (Kaldi) or ``"silence"`` (only digital silence, what the prep uses).

    Returns:
        float32 ``(T, 80)`` with ``T = num_frames(N)`` (0 rows when ``N < 400``).

    Raises:
        TypeError: integer samples. ValueError: not 1-D, or NaN/Inf samples.
    """
    f = OnlineFbank(sample_rate=sample_rate, dither=dither, dither_seed=dither_seed, dither_mode=dither_mode)
    f.accept_waveform(waveform)
    f.input_finished()
    return f.pop_frames()
