"""A synthetic multi-way corpus built directly in feature space (no audio), for tests and benchmarks.

Each English word is a fixed random 80-dim "spectral template" held for a few frames with noise;
translations are word-for-word lexicons per language (de, es, fr). An ``xs`` model learns it in a few
hundred updates; it builds in about a second and is fully deterministic. The output follows the DATA
contract (manifest columns, ``fbank80.zip``, ``gcmvn.npz``, SentencePiece vocabularies, ``config.yaml``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mmst.atomic import atomic_write_text

EN_WORDS = ["the", "cat", "dog", "sees", "likes", "a", "bird", "fish", "big", "small", "red", "blue"]
LEXICON = {
    "de": ["der", "katze", "hund", "sieht", "mag", "ein", "vogel", "fisch", "gross", "klein", "rot", "blau"],
    "es": ["el", "gato", "perro", "ve", "quiere", "un", "pajaro", "pez", "grande", "chico", "rojo", "azul"],
    "fr": ["le", "chat", "chien", "voit", "aime", "un", "oiseau", "poisson", "grand", "petit", "rouge", "bleu"],
}


def sentences(rng: np.random.Generator, n: int) -> list[list[int]]:
    """``n`` random sentences of 3-6 word indices into :data:`EN_WORDS`."""
    out = []
    for _ in range(n):
        ln = int(rng.integers(3, 7))
        out.append([int(x) for x in rng.integers(0, len(EN_WORDS), size=ln)])
    return out


def build_feature_corpus(root: str | Path, langs: tuple[str, ...] = ("de", "es"), n_train: int = 64,
                         n_dev: int = 16, seed: int = 0, frames_per_word: int = 12,
                         missing_every: int = 0) -> Path:
    """Write a synthetic DATA dir under ``root`` and return it (see module docstring).

    Sizes: ``n_train``/``n_dev`` utterances of 3-6 words, ``frames_per_word`` 10 ms frames each.

    Args:
        langs: target languages (subset of de, es, fr).
        n_train, n_dev: utterances per split (dev uses different sentences, same templates).
        frames_per_word: fbank frames (10 ms) per word.
        missing_every: if > 0, every n-th training utterance has an empty translation for the
            LAST language (exercises all-pad rows).
    """
    import yaml

    from mmst.data.manifest import manifest_columns, write_manifest
    from mmst.data.store import pack_npy_files
    from mmst.data.vocab import lang_tag, train_sentencepiece

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    templates = rng.normal(0.0, 3.0, size=(len(EN_WORDS), 80)).astype(np.float32) + 5.0
    npy_dir = root / "npy"
    npy_dir.mkdir(exist_ok=True)
    splits = {"train": sentences(rng, n_train), "dev": sentences(rng, n_dev)}
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
    atomic_write_text(root / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))
    return root
