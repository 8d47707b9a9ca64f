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


# ------------------------------------------------------------------ DDP and DropCompute over an HF encoder
#: per rank: the durations (s) of the utterances of its micro-batches (unequal within and across ranks)
HF_DIST_SECONDS = {0: [[0.6, 0.4], [0.5]], 1: [[0.3, 0.7, 0.5], [0.45]]}
HF_DIST_WAITKS = [2, 3]  # one wait-k per micro-batch


def hf_batch(model, seconds: list[float], seed: int):
    """A :class:`mmst.data.batching.Batch` of noise waveforms ``(B, T, 1)`` (16 kHz) of ``seconds`` with 2-4
    random target tokens + EOS per language (deterministic in ``seed``)."""
    from mmst.data.batching import Batch

    g = torch.Generator().manual_seed(seed)
    n = [int(s * 16000) for s in seconds]
    wave = torch.zeros(len(n), max(n), 1)
    for i, m in enumerate(n):
        wave[i, :m, 0] = 0.3 * torch.randn(m, generator=g)
    target, prev, ntokens = {}, {}, {}
    for lang in LANGS:
        lens = [int(x) for x in torch.randint(2, 5, (len(n),), generator=g)]
        t = torch.ones(len(n), max(lens) + 1, dtype=torch.long)
        p = torch.ones_like(t)
        for i, length in enumerate(lens):
            toks = torch.randint(6, V, (length,), generator=g)
            t[i, :length], t[i, length] = toks, 2
            p[i, 0], p[i, 1 : length + 1] = model.start_token_id(lang), toks
        target[lang], prev[lang], ntokens[lang] = t, p, sum(lens) + len(n)
    return Batch(ids=[f"s{seed}u{i}" for i in range(len(n))], fbank=wave, fbank_lengths=torch.tensor(n),
                 target=target, prev_output_tokens=prev, src_tokens=torch.ones(len(n), 0, dtype=torch.long),
                 src_lengths=torch.zeros(len(n), dtype=torch.long), ntokens=ntokens)


def hf_dist_batches(model, rank: int) -> list:
    return [hf_batch(model, s, 100 * rank + i) for i, s in enumerate(HF_DIST_SECONDS[rank])]


def hf_update(model, strategy) -> list[float]:
    """One update of ``model`` with SGD(lr=1) through ``strategy.run_update`` on the micro-batches of this
    rank (all ranks' in order for a single process); returns the parameters after it, flattened."""
    from mmst.losses import MultilingualCriterion

    rank = getattr(getattr(strategy, "env", None), "rank", None)
    batches = ([b for r in sorted(HF_DIST_SECONDS) for b in hf_dist_batches(model, r)] if rank is None
               else hf_dist_batches(model, rank))
    waitks = (HF_DIST_WAITKS * len(HF_DIST_SECONDS) if rank is None else HF_DIST_WAITKS)[: len(batches)]
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    strategy.run_update(model, MultilingualCriterion(label_smoothing=0.1, pad_id=1), opt, None, batches, waitks, 0.0)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def hf_dist_rank(argv: list[str]) -> dict:
    """One rank (spawned by :func:`mmst.simulation.run.launch_local`, W = 2): one ``ddp`` update, then one
    ``dropcompute`` update (tau = inf), each of a fresh model over the folder ``argv[0]`` seeded by the rank
    (the strategies broadcast rank 0's parameters); returns the parameters after each."""
    from distributed_fixtures import stub_trainer

    from mmst.distributed.env import init_distributed, shutdown
    from mmst.training.distributed import TrainerDDP, TrainerDropCompute

    torch.set_num_threads(1)
    env = init_distributed("gloo", 60.0)
    try:
        out = {}
        for mode in ("ddp", "dropcompute"):
            strat = (TrainerDDP(dist_timeout=60) if mode == "ddp"
                     else TrainerDropCompute(dist_timeout=60, compute_threshold="inf"))
            model = hf_model(Path(argv[0]), seed=env.rank)
            strat.setup(stub_trainer(model))
            out[mode] = hf_update(model, strat)
        return out
    finally:
        shutdown(env)
