"""Long synthetic talks: utterances joined with pauses, written in the MuST-C talk layout.

:func:`build_long_talk` concatenates 16 kHz utterances (e.g. a test split's) with pauses of random
length, cycling through them until a target length is reached, and records where each one lies;
:func:`write_long_talk` writes the talk as ``NAME.wav`` plus ``NAME.yaml`` (MuST-C segment lines,
seconds) and ``NAME.<lang>`` (one reference per line), the input of ``eval/longform_eval.py``
(``--audio NAME.wav --segments NAME.yaml --refs de=NAME.de``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000


@dataclass
class LongTalk:
    """A built talk.

    Attributes:
        audio: float32 ``(N,)`` at 16 kHz.
        offsets_s, durations_s: each utterance's position in the talk, seconds.
        order: index of the source utterance of each position (utterances repeat when cycled).
        refs: ``{lang: [reference of each position]}``.
    """

    audio: np.ndarray
    offsets_s: list[float]
    durations_s: list[float]
    order: list[int]
    refs: dict[str, list[str]]

    @property
    def duration_s(self) -> float:
        """Talk length in seconds."""
        return self.audio.size / SAMPLE_RATE


def build_long_talk(audios: Sequence[np.ndarray], refs: Mapping[str, Sequence[str]] | None = None, *,
                    pause_s: tuple[float, float] = (0.3, 0.8), lead_s: float = 0.5,
                    duration_s: float = 0.0, max_utterances: int | None = None, seed: int = 0) -> LongTalk:
    """Join utterances with pauses drawn uniformly from ``pause_s`` (seconds).

    Args:
        audios: utterances, float32 16 kHz (empty ones are skipped).
        refs: ``{lang: [reference per utterance]}`` (same order as ``audios``).
        pause_s: (shortest, longest) pause between utterances, seconds.
        lead_s: silence before the first and after the last utterance, seconds.
        duration_s: stop after the utterance that makes the talk this long, cycling through the utterances
            when they are too few (0 = every utterance once).
        max_utterances: stop after this many positions (None = no limit).
        seed: pause lengths.

    Raises:
        ValueError: no non-empty utterance, a bad pause range, or references of the wrong length.
    """
    lo, hi = pause_s
    if not 0 <= lo <= hi:
        raise ValueError(f"pause range must satisfy 0 <= lo <= hi, got {pause_s}")
    refs = {lang: list(r) for lang, r in (refs or {}).items()}
    for lang, r in refs.items():
        if len(r) != len(audios):
            raise ValueError(f"{len(r)} {lang} references for {len(audios)} utterances")
    usable = [i for i, a in enumerate(audios) if np.asarray(a).size]
    if not usable:
        raise ValueError("no non-empty utterance to build a talk from")
    rng = np.random.default_rng(seed)
    lead = np.zeros(int(round(lead_s * SAMPLE_RATE)), dtype=np.float32)
    pieces, offsets, durs, order = [lead], [], [], []
    n = lead.size
    k = 0
    while True:
        i = usable[k % len(usable)]
        if order:
            gap = np.zeros(int(round(rng.uniform(lo, hi) * SAMPLE_RATE)), dtype=np.float32)
            pieces.append(gap)
            n += gap.size
        a = np.asarray(audios[i], dtype=np.float32)
        offsets.append(n / SAMPLE_RATE)
        durs.append(a.size / SAMPLE_RATE)
        order.append(i)
        pieces.append(a)
        n += a.size
        k += 1
        if max_utterances is not None and k >= max_utterances:
            break
        if (duration_s > 0 and n / SAMPLE_RATE >= duration_s) or (duration_s <= 0 and k >= len(usable)):
            break
    pieces.append(lead)
    return LongTalk(np.concatenate(pieces), offsets, durs, order,
                    {lang: [r[i] for i in order] for lang, r in refs.items()})


def write_long_talk(talk: LongTalk, out_dir: str | os.PathLike, name: str = "talk") -> dict[str, Path]:
    """Write ``NAME.wav`` (16-bit PCM), ``NAME.yaml`` and ``NAME.<lang>`` under ``out_dir``.

    Returns:
        ``{"wav": path, "yaml": path, <lang>: path, ...}``.
    """
    import soundfile as sf

    from mmst.atomic import atomic_write_lines

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"wav": out / f"{name}.wav", "yaml": out / f"{name}.yaml"}
    sf.write(paths["wav"], talk.audio, SAMPLE_RATE, subtype="PCM_16")
    atomic_write_lines(paths["yaml"], [f"- {{duration: {d:.6f}, offset: {o:.6f}, speaker_id: spk, wav: {name}.wav}}"
                                       for o, d in zip(talk.offsets_s, talk.durations_s)])
    for lang, r in talk.refs.items():
        paths[lang] = out / f"{name}.{lang}"
        atomic_write_lines(paths[lang], [s.replace("\n", " ") for s in r])
    return paths


def iter_long_talk(audios: Sequence[np.ndarray], duration_s: float, chunk_samples: int, *,
                   pause_s: tuple[float, float] = (0.3, 0.8), lead_s: float = 0.5, seed: int = 0):
    """The audio of a talk like :func:`build_long_talk`'s, generated chunk by chunk (a 60-minute talk
    never exists in memory at once): utterances cycled with random pauses until ``duration_s``.

    Yields:
        ``(chunk float32 (<= chunk_samples,), utterance starts in this chunk as absolute seconds)``; the
        last chunk may be shorter; the talk ends at ``duration_s`` (possibly inside an utterance).

    Raises:
        ValueError: no non-empty utterance, a bad pause range, ``chunk_samples`` < 1.
    """
    lo, hi = pause_s
    if not 0 <= lo <= hi:
        raise ValueError(f"pause range must satisfy 0 <= lo <= hi, got {pause_s}")
    if chunk_samples < 1:
        raise ValueError(f"chunk_samples must be >= 1, got {chunk_samples}")
    usable = [np.asarray(a, dtype=np.float32) for a in audios if np.asarray(a).size]
    if not usable:
        raise ValueError("no non-empty utterance to build a talk from")
    rng = np.random.default_rng(seed)
    total = int(round(duration_s * SAMPLE_RATE))
    buf: list[np.ndarray] = [np.zeros(int(round(lead_s * SAMPLE_RATE)), dtype=np.float32)]
    have, pos, k = buf[0].size, 0, 0
    starts: list[float] = []
    while pos < total:
        while have < chunk_samples and pos + have < total:
            if k:
                gap = np.zeros(int(round(rng.uniform(lo, hi) * SAMPLE_RATE)), dtype=np.float32)
                buf.append(gap)
                have += gap.size
            starts.append((pos + have) / SAMPLE_RATE)
            buf.append(usable[k % len(usable)])
            have += usable[k % len(usable)].size
            k += 1
        cat = np.concatenate(buf)
        n = min(chunk_samples, total - pos)
        chunk, rest = cat[:n], cat[n:]
        end_s = (pos + n) / SAMPLE_RATE
        yield chunk, [s for s in starts if s < end_s]
        starts = [s for s in starts if s >= end_s]
        buf, have, pos = [rest], rest.size, pos + n
