"""Tiny DATA directories for training tests (owned by the train helper; other tests may import it).

Builders:

* :func:`build_feature_corpus` - a synthetic multi-way corpus built directly in feature space (no
  audio): each English word is a fixed random 80-dim "spectral template" held for a few frames with
  noise; translations are word-for-word lexicons per language. Learnable by an ``xs`` model in a
  few hundred updates, builds in ~1 s, fully deterministic. Follows the DATA contract of
  docs/CONTRACTS.md (manifest columns, fbank80.zip, gcmvn.npz, SentencePiece vocabs, config.yaml).
* :func:`build_espeak_raw_corpus` + :func:`prep_multiway` - real speech: espeak-ng English audio of the
  same lexicon sentences in the raw MuST-C layout, prepared by ``data_prep/prep_multiway.py`` (~2 s).
* :func:`build_grammar_corpus` - ``data_prep/synthesize_corpus.py --grammar --difficulty easy`` then
  ``prep_multiway.py``; None when unavailable.

Session-scoped pytest fixtures ``tiny_feature_data``, ``tiny_speech_data``, ``tiny_grammar_data`` are
used by importing them in a test file (``from fixtures_data import tiny_feature_data  # noqa: F401``;
add ``# noqa: F811`` on the test functions that take them).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

EN_WORDS = ["the", "cat", "dog", "sees", "likes", "a", "bird", "fish", "big", "small", "red", "blue"]
LEXICON = {
    "de": ["der", "katze", "hund", "sieht", "mag", "ein", "vogel", "fisch", "gross", "klein", "rot", "blau"],
    "es": ["el", "gato", "perro", "ve", "quiere", "un", "pajaro", "pez", "grande", "chico", "rojo", "azul"],
    "fr": ["le", "chat", "chien", "voit", "aime", "un", "oiseau", "poisson", "grand", "petit", "rouge", "bleu"],
}


def _sentences(rng: np.random.Generator, n: int) -> list[list[int]]:
    out = []
    for _ in range(n):
        ln = int(rng.integers(3, 7))
        out.append([int(x) for x in rng.integers(0, len(EN_WORDS), size=ln)])
    return out


def build_feature_corpus(root: str | Path, langs: tuple[str, ...] = ("de", "es"), n_train: int = 64,
                         n_dev: int = 16, seed: int = 0, frames_per_word: int = 12,
                         missing_every: int = 0) -> Path:
    """Write a synthetic DATA dir under ``root`` and return it (see module docstring).

    Args:
        langs: target languages (subset of de, es, fr).
        n_train, n_dev: utterances per split (dev uses different sentences, same templates).
        frames_per_word: fbank frames (10 ms) per word.
        missing_every: if > 0, every n-th training utterance has an empty translation for the
            LAST language (exercises all-pad rows).
    """
    from mmst.data.manifest import manifest_columns, write_manifest
    from mmst.data.store import pack_npy_files
    from mmst.data.vocab import lang_tag, train_sentencepiece

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    templates = rng.normal(0.0, 3.0, size=(len(EN_WORDS), 80)).astype(np.float32) + 5.0
    npy_dir = root / "npy"
    npy_dir.mkdir(exist_ok=True)
    splits = {"train": _sentences(rng, n_train), "dev": _sentences(rng, n_dev)}
    members = []
    rows_by_split: dict[str, list[dict[str, str]]] = {}
    all_feats = []
    for split, sents in splits.items():
        rows = []
        for i, s in enumerate(sents):
            uid = f"{split}_{i:04d}"
            f = np.repeat(templates[s], frames_per_word, axis=0)
            f = f + rng.normal(0.0, 0.3, size=f.shape).astype(np.float32)
            np.save(npy_dir / f"{uid}.npy", f.astype(np.float32))
            members.append((f"{uid}.npy", str(npy_dir / f"{uid}.npy")))
            if split == "train":
                all_feats.append(f)
            row = {"id": uid, "n_frames": str(f.shape[0]), "speaker": "spk0",
                   "src_text": " ".join(EN_WORDS[w] for w in s), "wav": "/dev/null", "offset": "0.0",
                   "duration": f"{f.shape[0] / 100:.2f}"}
            for j, lang in enumerate(langs):
                text = " ".join(LEXICON[lang][w] for w in s)
                if missing_every and split == "train" and j == len(langs) - 1 and i % missing_every == 0:
                    text = ""
                row[f"tgt_text_{lang}"] = text
            rows.append(row)
        rows_by_split[split] = rows
    fields = pack_npy_files(root / "fbank80.zip", members, progress=False)
    for split, rows in rows_by_split.items():
        for r in rows:
            r["audio"] = fields[f"{r['id']}.npy"]
        write_manifest(root / f"{split}.tsv", rows, manifest_columns(list(langs)))
    cat = np.concatenate(all_feats)
    np.savez(root / "gcmvn.npz", mean=cat.mean(0).astype(np.float32), std=cat.std(0).astype(np.float32))
    tgt_sents = [" ".join(LEXICON[lang]) for lang in langs] * 4
    train_sentencepiece(tgt_sents + [" ".join(LEXICON[lg][w] for w in s) for s in splits["train"] for lg in langs],
                        root / "spm_joint.model", 64, user_defined_symbols=[lang_tag(lg) for lg in langs],
                        write_fairseq_dict=False)
    train_sentencepiece([" ".join(EN_WORDS)] * 4 + [" ".join(EN_WORDS[w] for w in s) for s in splits["train"]],
                        root / "spm_src.model", 32, write_fairseq_dict=False)
    per = {}
    for lg in langs:
        train_sentencepiece([" ".join(LEXICON[lg])] * 4, root / f"spm_{lg}.model", 32, model_type="word",
                            write_fairseq_dict=False)
        per[lg] = f"spm_{lg}.model"
    for p in npy_dir.iterdir():
        p.unlink()
    npy_dir.rmdir()
    cfg = {"tgt_langs": list(langs), "src_lang": "en", "features": "fbank80.zip", "gcmvn": "gcmvn.npz",
           "vocab": {"joint": "spm_joint.model", "src": "spm_src.model", "per_lang": per},
           "input_feat_per_channel": 80, "sample_rate": 16000, "splits": ["train", "dev"],
           "bpe_tokenizer": {"bpe": "sentencepiece", "sentencepiece_model": "spm_joint.model"},
           "global_cmvn": {"stats_npz_path": "gcmvn.npz"}, "vocab_filename": "spm_joint.txt"}
    with open(root / "config.yaml", "w", encoding="utf-8") as fh:
        yaml.safe_dump(cfg, fh, sort_keys=False)
    return root


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
        sents = _sentences(rng, n)
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
    """Run ``data_prep/prep_multiway.py --root RAW --out OUT`` (raises CalledProcessError on failure)."""
    subprocess.run([sys.executable, str(REPO / "data_prep" / "prep_multiway.py"), "--root", str(raw), "--out",
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


@pytest.fixture(scope="session")
def tiny_feature_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session-scoped synthetic feature corpus (de, es; 64 train / 16 dev utterances)."""
    return build_feature_corpus(tmp_path_factory.mktemp("tiny_feature_data"), missing_every=7)


@pytest.fixture(scope="session")
def tiny_speech_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session-scoped real-pipeline corpus: espeak-ng English speech of lexicon sentences (de, es; 24 train /
    6 dev), prepared by ``data_prep/prep_multiway.py``. Skips when espeak-ng or the script is missing."""
    root = tmp_path_factory.mktemp("tiny_speech_data")
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
def tiny_acceptance_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The easy grammar corpus (de, es, fr, ja; 40 train utterances) when the synth pipeline is available,
    else the espeak lexicon corpus of :func:`build_espeak_raw_corpus` (de, es); skips without espeak-ng."""
    d = build_grammar_corpus(tmp_path_factory.mktemp("tiny_acceptance_grammar"))
    if d is not None:
        return d
    root = tmp_path_factory.mktemp("tiny_acceptance_espeak")
    if not (REPO / "data_prep" / "prep_multiway.py").is_file():
        pytest.skip("data_prep/prep_multiway.py not available")
    try:
        raw = build_espeak_raw_corpus(root / "raw")
    except RuntimeError as e:
        pytest.skip(str(e))
    return prep_multiway(raw, root / "data")
