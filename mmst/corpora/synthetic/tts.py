"""English speech from espeak-ng (subprocess, one call per sentence), resampled to 16 kHz with soxr.

Speakers are (espeak voice, variant, rate in words/min, pitch 0-99) combinations. With held-out voices,
dev/test use accents AND variants that never occur in training (disjoint sets), so every dev/test
voice is unheard in training.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np
import soxr

SAMPLE_RATE = 16000
"""Output sample rate in Hz."""

TRAIN_VOICES = ("en-us", "en-gb", "en-gb-x-rp", "en-gb-x-gbclan", "en-us-nyc")
TRAIN_VARIANTS = ("m1", "m2", "m3", "m4", "f1", "f2", "f3")
HELDOUT_VOICES = ("en-gb-scotland", "en-029", "en-gb-x-gbcwmd")
HELDOUT_VARIANTS = ("m5", "m7", "f4", "f5")
RATES_WPM = (150, 160, 170, 180)
PITCHES = (35, 45, 55, 65)


class EspeakNotFoundError(RuntimeError):
    """Raised when the ``espeak-ng`` binary is not on PATH."""


class TTSError(RuntimeError):
    """Raised when espeak-ng fails or returns no audio (message names the text and voice)."""


@dataclass(frozen=True)
class Speaker:
    """One synthetic speaker: espeak ``voice`` (accent), ``variant`` (m1..f5), ``rate`` (words/min),
    ``pitch`` (0-99)."""

    voice: str
    variant: str
    rate: int
    pitch: int

    @property
    def speaker_id(self) -> str:
        """``spk_<voice>_<variant>_r<rate>_p<pitch>`` (used as MuST-C ``speaker_id``)."""
        return f"spk_{self.voice}_{self.variant}_r{self.rate}_p{self.pitch}"

    @property
    def espeak_voice(self) -> str:
        """Voice string for ``espeak-ng -v``."""
        return f"{self.voice}+{self.variant}"


def speaker_pool(kind: str = "all") -> list[Speaker]:
    """All speakers of a pool: ``train`` (train voices/variants), ``heldout`` (disjoint voices and
    variants) or ``all`` (both). Raises ValueError on an unknown kind."""
    if kind not in ("train", "heldout", "all"):
        raise ValueError(f"unknown speaker pool {kind!r}")
    voices, variants = (), ()
    if kind in ("train", "all"):
        voices, variants = voices + TRAIN_VOICES, variants + TRAIN_VARIANTS
    out = [Speaker(v, w, r, p) for v in voices for w in variants for r in RATES_WPM for p in PITCHES]
    if kind in ("heldout", "all"):
        out += [Speaker(v, w, r, p) for v in HELDOUT_VOICES for w in HELDOUT_VARIANTS
                for r in RATES_WPM for p in PITCHES]
    return out


def pick_speaker(pool: list[Speaker], rng: random.Random) -> Speaker:
    """Deterministic choice of one speaker from ``pool`` with ``rng``."""
    return pool[rng.randrange(len(pool))]


def espeak_binary() -> str:
    """Path of ``espeak-ng``. Raises EspeakNotFoundError with install instructions if missing."""
    path = shutil.which("espeak-ng")
    if path is None:
        raise EspeakNotFoundError(
            "espeak-ng not found on PATH: install the Debian package `espeak-ng` "
            "(sudo apt-get install espeak-ng)")
    return path


def _parse_wav(data: bytes) -> tuple[np.ndarray, int]:
    """Parse espeak's streamed RIFF (sizes may be 0x7fffffff): returns (int16 samples, sample rate)."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise TTSError("espeak-ng did not return a RIFF/WAVE stream")
    pos, sr = 12, None
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], int.from_bytes(data[pos + 4:pos + 8], "little")
        if cid == b"fmt ":
            sr = int.from_bytes(data[pos + 12:pos + 16], "little")
        if cid == b"data":
            body = data[pos + 8:]
            body = body[: len(body) // 2 * 2]
            return np.frombuffer(body, dtype="<i2").copy(), sr or 22050
        pos += 8 + size
    raise TTSError("no data chunk in espeak-ng output")


def synthesize(text: str, speaker: Speaker) -> np.ndarray:
    """Speak ``text`` (English) with ``speaker``: float32 ``(N,)`` in [-1, 1] at 16 kHz.

    espeak-ng's 22.05 kHz PCM16 output is resampled with soxr (HQ). The text goes through stdin (no
    SSML). Raises EspeakNotFoundError, TTSError (non-zero exit or empty audio).
    """
    cmd = [espeak_binary(), "-v", speaker.espeak_voice, "-s", str(speaker.rate), "-p", str(speaker.pitch),
           "--stdout"]
    clean = " ".join(text.split())
    proc = subprocess.run(cmd, input=clean.encode("utf-8"), capture_output=True, check=False)
    if proc.returncode != 0:
        raise TTSError(f"espeak-ng failed ({proc.returncode}) for voice {speaker.espeak_voice} "
                       f"text {clean[:80]!r}: {proc.stderr.decode(errors='replace')[:200]}")
    pcm, sr = _parse_wav(proc.stdout)
    if pcm.size == 0:
        raise TTSError(f"espeak-ng returned no audio for voice {speaker.espeak_voice} text {clean[:80]!r}")
    x = pcm.astype(np.float32) / 32768.0
    if sr != SAMPLE_RATE:
        x = soxr.resample(x, sr, SAMPLE_RATE, quality="HQ").astype(np.float32)
    return np.clip(x, -1.0, 1.0)
