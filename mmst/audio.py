"""Audio input: read any common format, downmix to mono, resample to 16 kHz, float in [-1, 1].

Conventions (see docs/CONTRACTS.md):

- Returned audio is a numpy ``(N,)`` float32 array, mono, at ``target_sr`` (16 kHz by default), with
  values in [-1, 1].
- **Scaling happens in exactly one place**: ``soundfile`` converts integer PCM to float when we ask
  for ``dtype="float32"`` (int16 ``x`` becomes ``x / 32768``). Nothing else in mmst scales audio
  amplitude, except :func:`mmst.features.fbank`, which multiplies by 32768 once because Kaldi fbank
  expects 16-bit-scaled samples. The helpers here refuse integer arrays so that a second, silent
  scaling cannot creep in.
- Formats: whatever the installed libsndfile reads; with libsndfile >= 1.1 that includes WAV, FLAC,
  Ogg/Vorbis, Ogg/Opus and MP3.
- Resampling uses ``soxr`` (high quality, linear phase), a dedicated resampling library, rather
  than an FFT resample of the whole signal.

Errors: every failure raises :class:`AudioError` whose message names the file (and the segment
when one was asked for): unreadable or unsupported file, empty file, zero-length segment, a
segment starting or ending past the end of the file, NaN or Inf samples.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import soundfile as sf
import soxr

TARGET_SAMPLE_RATE = 16000
"""Sample rate (Hz) of all audio inside mmst."""


class AudioError(Exception):
    """Audio could not be used. The message names the file and, for segments, the time range."""


@dataclass(frozen=True)
class AudioInfo:
    """Header information of an audio file.

    Attributes:
        path: the file path as given.
        sample_rate: native sample rate in Hz.
        num_samples: number of samples per channel (``frames`` in libsndfile terms).
        channels: channel count.
        duration_s: ``num_samples / sample_rate`` in seconds.
        format: libsndfile container name, e.g. ``"WAV"``, ``"OGG"``, ``"FLAC"``, ``"MP3"``.
        subtype: libsndfile sample encoding, e.g. ``"PCM_16"``, ``"OPUS"``, ``"FLOAT"``.
    """

    path: str
    sample_rate: int
    num_samples: int
    channels: int
    duration_s: float
    format: str
    subtype: str


def audio_info(path: str | os.PathLike[str]) -> AudioInfo:
    """Read the header of an audio file.

    Args:
        path: audio file (any format libsndfile reads).

    Returns:
        :class:`AudioInfo`.

    Raises:
        AudioError: the file does not exist or cannot be parsed.
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise AudioError(f"{p}: audio file not found")
    try:
        info = sf.info(p)
    except Exception as e:  # soundfile raises LibsndfileError / RuntimeError / TypeError
        raise AudioError(f"{p}: unreadable audio ({type(e).__name__}: {e})") from e
    return AudioInfo(
        path=p,
        sample_rate=int(info.samplerate),
        num_samples=int(info.frames),
        channels=int(info.channels),
        duration_s=float(info.frames) / float(info.samplerate) if info.samplerate else 0.0,
        format=str(info.format),
        subtype=str(info.subtype),
    )


def _check_float(x: np.ndarray, what: str) -> None:
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(
            f"{what}: expected float samples in [-1, 1], got dtype {x.dtype}; "
            "read audio with mmst.audio.load_audio (the one place where integer PCM is scaled)"
        )


def to_mono(x: np.ndarray) -> np.ndarray:
    """Downmix to mono by averaging channels.

    Args:
        x: float array ``(N,)`` (already mono) or ``(N, C)`` (soundfile's layout).

    Returns:
        float32 ``(N,)``.

    Raises:
        TypeError: integer input (scaling must happen only in :func:`load_audio`).
        ValueError: more than 2 dimensions.
    """
    _check_float(x, "to_mono")
    if x.ndim == 1:
        return x.astype(np.float32, copy=False)
    if x.ndim != 2:
        raise ValueError(f"to_mono: expected (N,) or (N, C) array, got shape {x.shape}")
    return x.mean(axis=1, dtype=np.float64).astype(np.float32)


def resample(x: np.ndarray, orig_sr: int, target_sr: int = TARGET_SAMPLE_RATE) -> np.ndarray:
    """Resample mono float audio with soxr ("HQ" quality).

    Args:
        x: float ``(N,)`` samples.
        orig_sr: input rate in Hz.
        target_sr: output rate in Hz.

    Returns:
        float32 ``(M,)`` with ``M ~= N * target_sr / orig_sr``; ``x`` itself (as float32) when the
        rates are equal.

    Raises:
        TypeError: integer input.
        ValueError: non-positive rates.
    """
    _check_float(x, "resample")
    if orig_sr <= 0 or target_sr <= 0:
        raise ValueError(f"resample: sample rates must be positive, got {orig_sr} -> {target_sr}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if orig_sr == target_sr or x.size == 0:
        return x
    return soxr.resample(x, orig_sr, target_sr, quality="HQ").astype(np.float32, copy=False)


def load_audio(
    path: str | os.PathLike[str],
    offset_s: float = 0.0,
    duration_s: float | None = None,
    target_sr: int = TARGET_SAMPLE_RATE,
    *,
    end_tolerance_s: float = 0.0,
) -> np.ndarray:
    """Load (a segment of) an audio file as mono float32 in [-1, 1] at ``target_sr``.

    Only the requested segment is decoded (``soundfile`` seeks), so reading many short segments of
    a long talk does not decode the whole talk each time.

    Args:
        path: audio file (wav, flac, ogg/vorbis, ogg/opus, mp3, ...).
        offset_s: start of the segment in seconds (>= 0).
        duration_s: segment length in seconds; ``None`` reads to the end of the file.
        target_sr: output sample rate in Hz (16000 in all of mmst).
        end_tolerance_s: a segment whose end lies at most this many seconds past the end of the
            file is silently shortened to the file end (rounded segment times of real corpora).
            A segment ending further out raises :class:`AudioError`.

    Returns:
        float32 ``(N,)`` with ``N ~= duration_s * target_sr``.

    Raises:
        AudioError: unreadable file, empty file, zero-length or negative segment, segment past the
            end of the file, NaN/Inf samples. The message names the file and the segment.
    """
    p = os.fspath(path)
    info = audio_info(p)
    sr = info.sample_rate
    seg = "" if (offset_s == 0.0 and duration_s is None) else f" segment [{offset_s:.3f}s, +{duration_s}s]"
    if info.num_samples <= 0:
        raise AudioError(f"{p}: empty audio file (0 samples)")
    if not np.isfinite(offset_s) or offset_s < 0:
        raise AudioError(f"{p}{seg}: invalid offset {offset_s!r}")
    start = int(round(offset_s * sr))
    if duration_s is None:
        stop = info.num_samples
    else:
        if not np.isfinite(duration_s) or duration_s < 0:
            raise AudioError(f"{p}{seg}: invalid duration {duration_s!r}")
        stop = start + int(round(duration_s * sr))
    if stop <= start:
        raise AudioError(f"{p}{seg}: zero-length segment")
    if start >= info.num_samples or stop > info.num_samples + int(round(end_tolerance_s * sr)):
        raise AudioError(
            f"{p}{seg}: segment past the end of the audio "
            f"(segment ends at {stop / sr:.3f}s, file is {info.duration_s:.3f}s long)"
        )
    stop = min(stop, info.num_samples)
    try:
        with sf.SoundFile(p) as fh:
            if start > 0:
                if fh.seekable():
                    fh.seek(start)
                else:  # pragma: no cover - all libsndfile formats we use are seekable
                    fh.read(start, dtype="float32", always_2d=True)
            data = fh.read(stop - start, dtype="float32", always_2d=True)
    except Exception as e:
        raise AudioError(f"{p}{seg}: cannot decode audio ({type(e).__name__}: {e})") from e
    if data.shape[0] == 0:
        raise AudioError(f"{p}{seg}: decoder returned no samples")
    if not np.isfinite(data).all():
        bad = int((~np.isfinite(data)).any(axis=1).argmax())
        raise AudioError(
            f"{p}{seg}: audio contains NaN or Inf (first at sample {start + bad}, {(start + bad) / sr:.3f}s)"
        )
    x = resample(to_mono(data), sr, target_sr)
    np.clip(x, -1.0, 1.0, out=x)
    return x


def write_audio(path: str | os.PathLike[str], x: np.ndarray, sample_rate: int = TARGET_SAMPLE_RATE,
                subtype: str | None = None) -> None:
    """Write mono float audio in [-1, 1] with soundfile (format from the file extension).

    Args:
        path: destination (``.wav`` -> PCM_16 by default, ``.flac``, ``.ogg`` ...).
        x: float ``(N,)`` samples.
        sample_rate: rate in Hz.
        subtype: libsndfile subtype (e.g. ``"PCM_16"``, ``"FLOAT"``, ``"OPUS"``); default per format.

    Raises:
        TypeError: integer input.
    """
    _check_float(np.asarray(x), "write_audio")
    sf.write(os.fspath(path), np.asarray(x, dtype=np.float32), sample_rate, subtype=subtype)
