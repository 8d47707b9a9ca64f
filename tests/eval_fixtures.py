"""Tiny DATA directory + untrained checkpoint for evaluation tests (not a test module).

:func:`make_tiny_system` writes, under ``root``:

- ``wav/utt<i>.wav``: a few seconds of synthetic "speech-like" audio (modulated tones + noise), one
  file at 16 kHz mono; optional extra files at 8 kHz, 44.1 kHz stereo, an all-zero file;
- ``DATA/``: ``config.yaml`` (tgt_langs, joint SentencePiece vocab with ``<lang:xx>`` tags, gcmvn),
  ``tst-COMMON.tsv`` (contract columns; ``wav``/``offset``/``duration`` point at the wavs);
- ``ckpt.pt``: an untrained unified model (tiny sizes, fixed seed) saved in the mmst checkpoint
  format with vocab fingerprints.  An untrained model emits arbitrary pieces, so decoding uses a
  length cap (``max_len_b``), which is fine for metric agreement and cost measurements.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import yaml

SENTS = {
    "de": ["das ist ein kleines haus", "der hund bellt laut", "wir gehen heute nach hause", "ich mag keinen tee"],
    "es": ["esta es una casa pequena", "el perro ladra fuerte", "hoy vamos a casa", "no me gusta el te"],
    "ja": ["これは小さな家です", "犬が大きな声で吠える", "今日は家に帰ります", "お茶は好きではない"],
}


def _speechy(n: int, sr: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / sr
    f0 = 120 + 40 * np.sin(2 * np.pi * 0.7 * t)
    x = 0.3 * np.sin(2 * np.pi * np.cumsum(f0) / sr) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
    x += 0.02 * rng.standard_normal(n)
    return x.astype(np.float32)


def make_tiny_system(
    root: Path,
    langs: tuple[str, ...] = ("de", "es"),
    durations_s: tuple[float, ...] = (1.7, 2.9, 0.45),
    extra_audio: bool = False,
    seed: int = 0,
    size_overrides: dict | None = None,
) -> dict:
    """Write wavs, DATA and an untrained checkpoint; returns ``{"data", "ckpt", "wavs", "refs"}``."""
    from mmst.data.manifest import manifest_columns, write_manifest
    from mmst.data.vocab import Vocab, lang_tag, train_sentencepiece
    from mmst.features import fbank
    from mmst.models import build_model, model_config_for_size
    from mmst.training.checkpoint import CHECKPOINT_FORMAT, vocab_fingerprint

    root = Path(root)
    wav_dir = root / "wav"
    wav_dir.mkdir(parents=True, exist_ok=True)
    data = root / "DATA"
    data.mkdir(parents=True, exist_ok=True)
    specs = [(f"utt{i}", d, 16000, 1) for i, d in enumerate(durations_s)]
    if extra_audio:
        specs += [("utt_8k", 1.2, 8000, 1), ("utt_44k_stereo", 1.3, 44100, 2), ("utt_silent", 1.0, 16000, 1)]
    wavs, rows = [], []
    feats = []
    for i, (name, dur, sr, ch) in enumerate(specs):
        n = int(round(dur * sr))
        x = np.zeros(n, np.float32) if name.endswith("silent") else _speechy(n, sr, seed + i)
        if ch == 2:
            x = np.stack([x, 0.5 * x], axis=1)
        p = wav_dir / f"{name}.wav"
        sf.write(p, x, sr, subtype="PCM_16")
        wavs.append(p)
        if sr == 16000 and ch == 1:
            feats.append(fbank(x))
        row = {"id": name, "audio": "fbank80.zip:0:0", "n_frames": str(int(dur * 100)), "speaker": "spk",
               "src_text": "hello", "wav": str(p.resolve()), "offset": "0.0", "duration": f"{dur:.4f}"}
        for lang in langs:
            row[f"tgt_text_{lang}"] = SENTS[lang][i % len(SENTS[lang])]
        rows.append(row)
    write_manifest(data / "tst-COMMON.tsv", rows, manifest_columns(list(langs)))
    allf = np.concatenate(feats, 0)
    np.savez(data / "gcmvn.npz", mean=allf.mean(0).astype(np.float32), std=np.maximum(allf.std(0), 1e-3).astype(np.float32))
    train_sentencepiece([s for lang in langs for s in SENTS[lang]], data / "spm_joint.model", 60,
                        user_defined_symbols=[lang_tag(lang) for lang in langs])
    vocab = Vocab.load(data / "spm_joint.model")
    cfg = {"tgt_langs": list(langs), "src_lang": "en", "features": "fbank80.zip", "gcmvn": "gcmvn.npz",
           "vocab": {"joint": "spm_joint.model"}, "input_feat_per_channel": 80, "sample_rate": 16000,
           "splits": ["tst-COMMON"]}
    (data / "config.yaml").write_text(yaml.safe_dump(cfg))
    torch.manual_seed(seed)
    ov = dict(d_model=64, encoder_layers=2, decoder_layers=1, attention_heads=2, ffn_dim=128, conv_channels=64,
              dropout=0.0, share_decoder_input_output_embed=False)
    ov.update(size_overrides or {})
    mcfg = model_config_for_size("xs", arch="unified", tgt_langs=list(langs), vocab_size=len(vocab),
                                 lang_tag_ids={lang: vocab.lang_tag_id(lang) for lang in langs}, **ov)
    model = build_model(mcfg).eval()
    ckpt = {"format": CHECKPOINT_FORMAT, "version": 1, "model": model.state_dict(), "model_cfg": mcfg.to_dict(),
            "model_arch": mcfg.arch, "data_dir": str(data.resolve()), "tgt_langs": list(langs), "vocab_mode": "joint",
            "vocab": {"tgt": {lang: vocab_fingerprint(data / "spm_joint.model", len(vocab)) for lang in langs}}}
    torch.save(ckpt, root / "ckpt.pt")
    refs = {lang: [r[f"tgt_text_{lang}"] for r in rows] for lang in langs}
    return {"data": data, "ckpt": root / "ckpt.pt", "wavs": wavs, "refs": refs, "rows": rows}
