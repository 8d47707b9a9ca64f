"""Shared pytest fixtures (keep small and additive).

- ``shared_data``: path of ``../shared/data`` (real reference data) or ``pytest.skip`` with a message.
- ``make_mustc``: writes a tiny raw corpus in MuST-C layout (tone/noise "speech", no TTS needed), see
  :func:`write_tiny_mustc`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``/work/shared/data`` (relative: ``../shared/data`` from the repo root), or skip."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real reference data not found at {SHARED_DATA}; skipping real-data test")
    return SHARED_DATA


def write_tiny_mustc(root: Path, langs=("de", "es"), talks=None, seg_s=0.6, gap_s=0.3, sr=16000,
                     seed: int = 0) -> dict[str, list[tuple[str, float, float]]]:
    """Write ``root/en-XX/data/<split>/{wav,txt}`` for every language, identical segments in every pair.

    Each talk: a wav of segments (a tone at a segment-specific frequency plus noise, amplitude ~0.3)
    separated by ``gap_s`` of exact digital silence (like espeak). Text: ``en`` = "talk T segment K
    words", ``XX`` = "[XX] T K ...".

    Args:
        root: corpus root.
        langs: target languages.
        talks: ``{split: [(talk_id, n_segments), ...]}``; default train 2 talks x 3, dev 1 x 2,
            tst-COMMON 1 x 2.
        seg_s, gap_s: segment and pause length in seconds.

    Returns:
        ``{split: [(talk, offset_s, duration_s), ...]}`` in yaml order.
    """
    talks = talks or {"train": [("ted_1", 3), ("ted_2", 3)], "dev": [("ted_3", 2)], "tst-COMMON": [("ted_4", 2)]}
    import soundfile as sf

    rng = np.random.default_rng(seed)
    segs: dict[str, list[tuple[str, float, float]]] = {}
    audio: dict[str, np.ndarray] = {}
    texts: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for split, tl in talks.items():
        segs[split], texts[split] = [], []
        for talk, n in tl:
            parts, t = [np.zeros(int(gap_s * sr), np.float32)], gap_s
            for k in range(n):
                dur = round(seg_s + 0.1 * k, 3)
                tt = np.arange(int(round(dur * sr))) / sr
                f0 = 200 + 50 * k + 10 * len(segs[split])
                x = 0.3 * np.sin(2 * np.pi * f0 * tt) + 0.02 * rng.standard_normal(tt.size)
                parts += [x.astype(np.float32), np.zeros(int(gap_s * sr), np.float32)]
                segs[split].append((talk, round(t, 3), dur))
                texts[split].append((f"talk {talk} segment {k} words here",
                                     {lang: f"[{lang}] {talk} {k} wort palabra" for lang in langs}))
                t += dur + gap_s
            audio[talk] = np.concatenate(parts)
    for lang in langs:
        for split in talks:
            base = root / f"en-{lang}" / "data" / split
            (base / "wav").mkdir(parents=True, exist_ok=True)
            (base / "txt").mkdir(parents=True, exist_ok=True)
            for talk, _ in talks[split]:
                sf.write(base / "wav" / f"{talk}.wav", audio[talk], sr, subtype="PCM_16")
            (base / "txt" / f"{split}.yaml").write_text("".join(
                f"- {{duration: {d}, offset: {o}, speaker_id: spk_{talk}, wav: {talk}.wav}}\n" for talk, o, d in segs[split]))
            (base / "txt" / f"{split}.en").write_text("".join(en + "\n" for en, _ in texts[split]))
            (base / "txt" / f"{split}.{lang}").write_text("".join(tr[lang] + "\n" for _, tr in texts[split]))
    return segs


@pytest.fixture
def make_mustc(tmp_path: Path):
    """Factory fixture: ``make_mustc(**kwargs) -> (raw_root, segments)``; see :func:`write_tiny_mustc`."""

    def _make(**kwargs):
        root = tmp_path / "raw"
        return root, write_tiny_mustc(root, **kwargs)

    return _make
