"""Tiny models and the wait-k reference runs shared by the policy tests.

``python tests/policy_fixtures.py`` rewrites ``tests/data/waitk_reference.json``: token ids and token
delays of the streaming wait-k decoder for a few tiny random models (unified sync, separate, async
unified), several k and segment sizes. The committed file was written by the streaming decoder as it
was before the policy protocol existed (lockstep wait-k); the policy tests check that the wait-k
policy reproduces it exactly.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from mmst.features import GlobalCMVN
from mmst.models import build_model, model_config_for_size

LANGS = ["de", "es", "ja"]
TAGS = {"de": 4, "es": 5, "ja": 6}
V = 30
R = 3  # 120 ms chunks
CMVN = GlobalCMVN(mean=np.full(80, 5.0, np.float32), std=np.full(80, 3.0, np.float32))
REFERENCE = Path(__file__).parent / "data" / "waitk_reference.json"

#: (name, arch, strategy, seed, k, segment_ms, audio seconds, max_len_b)
CASES = [
    ("unified_k1_320", "unified", "sync", 1, 1, 320.0, 1.9, 30),
    ("unified_k3_100", "unified", "sync", 3, 3, 100.0, 1.9, 30),
    ("unified_k2_37", "unified", "sync", 10, 2, 37.0, 2.3, 30),
    ("separate_k2_320", "separate", "sync", 4, 2, 320.0, 1.9, 30),
    ("separate_k1_100", "separate", "sync", 5, 1, 100.0, 1.6, 25),
    ("async_k2_320", "unified", "async", 6, 2, 320.0, 1.9, 25),
    ("async_k1_100", "unified", "async", 7, 1, 100.0, 1.5, 25),
]


def make(arch: str = "unified", seed: int = 0, strategy: str = "sync", src_vocab_size: int = 0, **kw):
    """A tiny random model (d=32, 2+2 layers, R=3) whose EOS is likely enough to end some streams."""
    torch.manual_seed(seed)
    base = dict(d_model=32, encoder_layers=2, decoder_layers=2, attention_heads=4, ffn_dim=64,
                conv_channels=16, dropout=0.0, pre_decision_ratio=R, src_vocab_size=src_vocab_size)
    if strategy == "async":
        base.update(strategy="async", async_delta=1)
    base.update(kw)
    cfg = model_config_for_size("xs", arch=arch, tgt_langs=LANGS, vocab_size=V,
                                lang_tag_ids=TAGS if arch == "unified" else None, **base)
    m = build_model(cfg).eval()
    with torch.no_grad():
        if getattr(m, "is_async", False):
            m.lang_embed.weight.normal_(0, 0.5)
        for dec in ([m.decoder] if arch == "unified" else list(m.decoders.values())):
            dec.embed_tokens.weight[2] *= 2.0
    return m


def audio(seconds: float, seed: int = 0) -> np.ndarray:
    """A chirp plus noise, 16 kHz float32."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 16000)
    t = np.arange(n) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t * (1 + t)) + 0.05 * rng.standard_normal(n)).astype(np.float32)


def run_case(case, **translator_kw) -> dict:
    """Stream one case with the wait-k translator; ``{"tokens": {lang: ids}, "delays": {lang: ms}}``."""
    from mmst.simultaneous import StreamingTranslator

    _, arch, strategy, seed, k, seg_ms, seconds, max_len_b = case
    m = make(arch, seed=seed, strategy=strategy)
    tr = StreamingTranslator(m, None, LANGS, waitk=k, cmvn=CMVN, max_len_b=max_len_b, **translator_kw)
    tr.translate(audio(seconds, seed=seed), seg_ms)
    return {"tokens": tr.tokens, "delays": tr.token_delays}


if __name__ == "__main__":
    torch.set_num_threads(1)
    out = {c[0]: run_case(c) for c in CASES}
    REFERENCE.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {REFERENCE}", file=sys.stderr)
