"""Tiny random Hugging Face speech encoders written with ``save_pretrained`` (nothing is downloaded).

:func:`write_tiny_hf` writes a folder for each supported model type (hidden size 32, 2 layers; the
wav2vec 2.0 family with 320-sample = 20 ms frames like the released models; Whisper with 16 mel bins
and a 2 s window instead of 30 s), and :func:`hf_model` builds an MMST model over it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mmst.models import build_model, model_config_for_size

HF_TYPES = ("wav2vec2", "hubert", "wavlm", "whisper")
LANGS = ["de", "es"]
TAGS = {"de": 4, "es": 5}
V = 24

_W2V = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            conv_dim=(16, 16, 16), conv_stride=(5, 8, 8), conv_kernel=(10, 8, 8), num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=2, hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
            feat_proj_dropout=0.0, layerdrop=0.0)


def write_tiny_hf(kind: str, folder: Path, seed: int = 0) -> Path:
    """Write a tiny random ``kind`` model (one of :data:`HF_TYPES`) to ``folder``; returns ``folder``."""
    import transformers as T

    torch.manual_seed(seed)
    if kind == "whisper":
        cfg = T.WhisperConfig(d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                              decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
                              max_source_positions=100, max_target_positions=16, vocab_size=16, pad_token_id=1,
                              bos_token_id=0, eos_token_id=2, decoder_start_token_id=0, dropout=0.0)
        T.WhisperModel(cfg).save_pretrained(folder)
        T.WhisperFeatureExtractor(feature_size=16, chunk_length=2).save_pretrained(folder)
    else:
        cls = {"wav2vec2": (T.Wav2Vec2Config, T.Wav2Vec2Model), "hubert": (T.HubertConfig, T.HubertModel),
               "wavlm": (T.WavLMConfig, T.WavLMModel)}[kind]
        cls[1](cls[0](**_W2V)).save_pretrained(folder)
    return Path(folder)


def hf_config(path: Path, arch: str = "unified", **kw):
    """A validated ``ModelConfig`` of a tiny MMST model (d=32, 1 decoder layer, R=3) over the folder."""
    base = dict(d_model=32, decoder_layers=1, attention_heads=4, ffn_dim=64, conv_channels=64,
                conv_kernel_sizes=[3], dropout=0.0, pre_decision_ratio=3, encoder_type="hf",
                hf_encoder_path=str(path), encoder_attention="offline")
    base.update(kw)
    return model_config_for_size("xs", arch=arch, tgt_langs=LANGS, vocab_size=V,
                                 lang_tag_ids=TAGS if arch == "unified" else None, **base)


def hf_model(path: Path, arch: str = "unified", seed: int = 0, **kw):
    """:func:`hf_config` built with ``build_model`` (seeded; eval mode); EOS made likely enough to end
    some streams (as ``policy_fixtures.make``)."""
    torch.manual_seed(seed)
    m = build_model(hf_config(path, arch, **kw)).eval()
    with torch.no_grad():
        for dec in ([m.decoder] if arch == "unified" else list(m.decoders.values())):
            dec.embed_tokens.weight[2] *= 2.0
    return m
