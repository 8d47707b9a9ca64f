"""Tiny DATA directories for end-to-end and training tests.

Builders:

* :func:`build_feature_corpus` - a synthetic multi-way corpus built directly in feature space (no
  audio): each English word is a fixed random 80-dim "spectral template" held for a few frames with
  noise; translations are word-for-word lexicons per language. Learnable by an ``xs`` model in a
  few hundred updates, builds in ~1 s, fully deterministic. Follows the DATA contract of
  docs/CONTRACTS.md (manifest columns, fbank80.zip, gcmvn.npz, SentencePiece vocabs, config.yaml).
* :func:`build_espeak_raw_corpus` + :func:`prep_multiway` - real speech: espeak-ng English audio of the
  same lexicon sentences in the raw MuST-C layout, prepared by ``data_prep/prep_multiway.py`` (~2 s).
* :func:`data_prep_main` - a ``data_prep/`` script's ``main`` in this process.
* :func:`build_grammar_corpus` - ``data_prep/synthesize_corpus.py --grammar --difficulty easy`` then
  ``prep_multiway.py``; None when unavailable.

Session-scoped pytest fixtures ``tiny_feature_data``, ``tiny_grammar_data`` and
``tiny_e2e_data`` are registered for every test by ``conftest.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from mmst.corpora.feature_corpus import EN_WORDS, LEXICON, build_feature_corpus, sentences  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def data_prep_main(script: str):
    """The ``main(argv) -> exit status`` of ``data_prep/<script>.py``, loaded in this process."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(script, REPO / "data_prep" / f"{script}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def build_espeak_raw_corpus(root: str | Path, langs: tuple[str, ...] = ("de", "es"), n_train: int = 24,
                            n_dev: int = 6, seed: int = 0) -> Path:
    """Write a tiny raw MuST-C-layout corpus (``RAW/en-XX/data/<split>/{wav,txt}``) with espeak-ng
    English audio of lexicon sentences; one talk per split (segments concatenated with 0.3 s gaps).

    Raises ``RuntimeError`` when espeak-ng is missing.
    """
    import shutil

    import soundfile as sf

    if shutil.which("espeak-ng") is None:
        raise RuntimeError("espeak-ng not installed")
    root = Path(root)
    rng = np.random.default_rng(seed)
    tmp = root / "_tts"
    tmp.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_dev)):
        sents = sentences(rng, n)
        pieces, segs, t = [], [], 0.0
        sr = 16000
        for i, s in enumerate(sents):
            w = tmp / f"{split}_{i}.wav"
            subprocess.run(["espeak-ng", "-v", "en", "-s", "170", "-w", str(w), " ".join(EN_WORDS[x] for x in s)],
                           check=True, capture_output=True)
            from mmst.audio import load_audio

            a = load_audio(str(w), target_sr=sr)
            gap = np.zeros(int(0.3 * sr), dtype=np.float32)
            segs.append((t, len(a) / sr))
            pieces += [a, gap]
            t += (len(a) + len(gap)) / sr
        audio = np.concatenate(pieces)
        for lang in langs:
            d = root / f"en-{lang}" / "data" / split
            (d / "wav").mkdir(parents=True, exist_ok=True)
            (d / "txt").mkdir(parents=True, exist_ok=True)
            sf.write(d / "wav" / f"talk_{split}.wav", audio, sr, subtype="PCM_16")
            (d / "txt" / f"{split}.yaml").write_text("".join(
                f"- {{duration: {dur:.3f}, offset: {off:.3f}, speaker_id: spk.1, wav: talk_{split}.wav}}\n"
                for off, dur in segs))
            (d / "txt" / f"{split}.en").write_text("".join(" ".join(EN_WORDS[x] for x in s) + "\n" for s in sents))
            (d / "txt" / f"{split}.{lang}").write_text(
                "".join(" ".join(LEXICON[lang][x] for x in s) + "\n" for s in sents))
    shutil.rmtree(tmp)
    return root


def prep_multiway(raw: str | Path, out: str | Path, splits: str = "train,dev", timeout_s: float = 300) -> Path:
    """Run ``data_prep/prep_multiway.py --mustc-root RAW --out OUT`` (raises CalledProcessError on failure)."""
    subprocess.run([sys.executable, str(REPO / "data_prep" / "prep_multiway.py"), "--mustc-root", str(raw), "--out",
                    str(out), "--splits", splits, "--no-progress"], check=True, timeout=timeout_s,
                   capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return Path(out)


def build_grammar_corpus(root: str | Path, langs: str = "de,es,fr,ja", n_train: int = 40, n_dev: int = 10,
                         n_test: int = 10, seed: int = 1, timeout_s: float = 600) -> Path | None:
    """Real synthetic pipeline: ``synthesize_corpus.py --grammar --difficulty easy`` then
    ``prep_multiway.py`` (splits train, dev, tst-COMMON). Returns the DATA dir, or None when the scripts
    are missing or fail."""
    synth = REPO / "data_prep" / "synthesize_corpus.py"
    if not (synth.is_file() and (REPO / "data_prep" / "prep_multiway.py").is_file()):
        return None
    root = Path(root)
    raw = root / "raw"
    try:
        subprocess.run([sys.executable, str(synth), "--grammar", "--difficulty", "easy", "--out", str(raw),
                        "--tgt-langs", langs, "--num-train", str(n_train), "--num-dev", str(n_dev),
                        "--num-test", str(n_test), "--seed", str(seed), "--jobs", "1"],
                       check=True, timeout=timeout_s, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        return prep_multiway(raw, root / "data", splits="train,dev,tst-COMMON", timeout_s=timeout_s)
    except (subprocess.SubprocessError, OSError):
        return None
