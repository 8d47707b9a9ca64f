"""Shared pytest fixtures.

- ``shared_data``: path of ``../shared/data`` (real reference data) or ``pytest.skip`` with a message.
- ``make_mustc``: writes a tiny raw corpus in MuST-C layout (tone/noise "speech", no TTS needed), see
  :func:`write_tiny_mustc`.
- ``tiny_model`` / ``tiny_model_config``: factories of a tiny MMST model (d_model 32, 2+2 layers,
  120 ms chunks) and its config; a test module sets its own defaults (languages, vocabulary size,
  ...) in a module-level ``TINY_MODEL`` dict, see :func:`build_tiny_model`.
- ``tiny_feature_data``, ``tiny_speech_data``, ``tiny_grammar_data``, ``tiny_e2e_data``: session-scoped
  DATA directories (builders in ``fixtures_data.py``).
- ``tiny_system``: session-scoped DATA + untrained checkpoint + wavs for evaluation tests
  (``eval_fixtures.make_tiny_system``, languages de, es, extra 8 kHz / 44.1 kHz / silent files).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixtures_data import build_espeak_raw_corpus, build_feature_corpus, build_grammar_corpus, prep_multiway

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


# ------------------------------------------------------------------------------------------ tiny model

TINY_MODEL_SIZE = dict(d_model=32, encoder_layers=2, decoder_layers=2, attention_heads=4, ffn_dim=64,
                       conv_channels=16, dropout=0.0, pre_decision_ratio=3)
"""Size of the tiny test model (a few 10k parameters; 1 chunk = 3 states = 120 ms)."""


def tiny_model_config(arch: str = "unified", langs=("de", "es", "fr"), vocab_size: int = 40,
                      lang_tag_ids: dict[str, int] | None = None, **overrides):
    """ModelConfig of the tiny model; ``<lang:xx>`` ids default to 4, 5, ... (unified only)."""
    from mmst.models import model_config_for_size

    langs = list(langs)
    if arch == "unified" and lang_tag_ids is None:
        lang_tag_ids = {lang: 4 + i for i, lang in enumerate(langs)}
    kw = {**TINY_MODEL_SIZE, **overrides}
    return model_config_for_size("xs", arch=arch, tgt_langs=langs, vocab_size=vocab_size,
                                 lang_tag_ids=lang_tag_ids if arch == "unified" else None, **kw)


def build_tiny_model(arch: str = "unified", seed: int = 0, eos_scale: float = 1.0,
                     lang_embed_std: float | None = None, **config):
    """A tiny model in eval mode, initialised after ``torch.manual_seed(seed)``.

    Args:
        eos_scale: multiply the EOS (id 2) input/output embedding row(s) by this (> 1 makes streams end
            before the length cap).
        lang_embed_std: re-draw the async language embedding from ``N(0, std)`` (async models only).
        **config: :func:`tiny_model_config` arguments.
    """
    import torch

    from mmst.models import build_model

    torch.manual_seed(seed)
    m = build_model(tiny_model_config(arch, **config)).eval()
    with torch.no_grad():
        if lang_embed_std is not None and getattr(m, "is_async", False):
            m.lang_embed.weight.normal_(0, lang_embed_std)
        if eos_scale != 1.0:
            for dec in ([m.decoder] if hasattr(m, "decoder") else list(m.decoders.values())):
                dec.embed_tokens.weight[2] *= eos_scale
    return m


def _module_defaults(request) -> dict:
    return dict(getattr(request.module, "TINY_MODEL", {}))


@pytest.fixture
def tiny_model(request):
    """Factory ``tiny_model(arch=..., seed=..., **overrides)`` of :func:`build_tiny_model`, with the test
    module's ``TINY_MODEL`` defaults."""
    defaults = _module_defaults(request)

    def make(arch: str | None = None, seed: int = 0, **kw):
        args = {**defaults, **kw}
        if arch is not None:
            args["arch"] = arch
        return build_tiny_model(seed=seed, **args)

    return make


@pytest.fixture
def tiny_model_cfg(request):
    """Factory ``tiny_model_cfg(arch=..., **overrides)`` of :func:`tiny_model_config` (module defaults applied;
    ``eos_scale``/``lang_embed_std`` ignored)."""
    defaults = {k: v for k, v in _module_defaults(request).items() if k not in ("eos_scale", "lang_embed_std")}

    def make(arch: str | None = None, **kw):
        args = {**defaults, **kw}
        if arch is not None:
            args["arch"] = arch
        return tiny_model_config(**args)

    return make


# ------------------------------------------------------------------------------------- tiny DATA dirs


@pytest.fixture(scope="session")
def tiny_feature_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session-scoped synthetic feature corpus (de, es; 64 train / 16 dev utterances)."""
    return build_feature_corpus(tmp_path_factory.mktemp("tiny_feature_data"), missing_every=7)


def _espeak_lexicon_data(root: Path) -> Path:
    """The espeak lexicon corpus of :func:`build_espeak_raw_corpus`, prepared under ``root/data``
    (skips the test when espeak-ng or ``data_prep/prep_multiway.py`` is missing)."""
    if not (REPO / "data_prep" / "prep_multiway.py").is_file():
        pytest.skip("data_prep/prep_multiway.py not available")
    try:
        raw = build_espeak_raw_corpus(root / "raw")
    except RuntimeError as e:
        pytest.skip(str(e))
    return prep_multiway(raw, root / "data")


@pytest.fixture(scope="session")
def tiny_grammar_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session-scoped ``--grammar --difficulty easy`` corpus via the synth + data pipeline (skips if absent)."""
    d = build_grammar_corpus(tmp_path_factory.mktemp("tiny_grammar_data"))
    if d is None:
        pytest.skip("data_prep/synthesize_corpus.py --grammar not available")
    return d


@pytest.fixture(scope="session")
def tiny_e2e_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The easy grammar corpus (de, es, fr, ja; 40 train utterances) when the synth pipeline is available,
    else the espeak lexicon corpus of :func:`build_espeak_raw_corpus` (de, es); skips without espeak-ng."""
    d = build_grammar_corpus(tmp_path_factory.mktemp("tiny_e2e_grammar"))
    if d is not None:
        return d
    return _espeak_lexicon_data(tmp_path_factory.mktemp("tiny_e2e_espeak"))


@pytest.fixture(scope="session")
def tiny_system(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``{"data", "ckpt", "wavs", "refs", "rows"}`` of :func:`eval_fixtures.make_tiny_system` (de, es, extra audio)."""
    import torch
    from eval_fixtures import make_tiny_system

    torch.set_num_threads(1)
    return make_tiny_system(tmp_path_factory.mktemp("tiny_system"), langs=("de", "es"), extra_audio=True)

