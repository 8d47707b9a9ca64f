"""Growing key/value buffers (mmst.models.layers.SeqBuffer/KVCache) and limited encoder left context
(``encoder_left_chunks``): streaming equals the masked full forward."""

from __future__ import annotations

import pytest
import torch

from mmst.models import build_model, model_config_for_size
from mmst.models.layers import KVCache, SeqBuffer
from mmst.models.masks import chunk_causal_mask


def test_seqbuffer_appends_like_cat():
    buf = SeqBuffer(1, min_capacity=2)
    parts = [torch.randn(2, n, 3) for n in (1, 3, 0, 5, 2)]
    for i, p in enumerate(parts):
        v = buf.append(p)
        torch.testing.assert_close(v, torch.cat(parts[: i + 1], dim=1), rtol=0, atol=0)
    assert buf.length == 11 and buf.capacity >= 11
    assert buf.capacity <= 2 * 11  # doubling, not one allocation per append


def test_seqbuffer_old_views_stay_valid_and_grad_fallback():
    buf = SeqBuffer(0, min_capacity=1)
    a = buf.append(torch.ones(1, 2))
    buf.append(torch.zeros(4, 2))  # reallocates
    assert torch.equal(a, torch.ones(1, 2))
    x = torch.randn(3, 2, requires_grad=True)
    g = SeqBuffer(0)
    g.append(x)
    y = g.append(x * 2)
    y.sum().backward()  # cat fallback under autograd: no in-place error
    assert torch.equal(x.grad, torch.full((3, 2), 3.0))


def test_kvcache_reorder_and_cat_switch():
    c = KVCache(min_capacity=1)
    k = torch.randn(3, 2, 4, 5)
    c.append(k, k + 1)
    r = c.reorder(torch.tensor([2, 0]))
    kk, vv = r.append(k[[2, 0], :, :1], k[[2, 0], :, :1])
    assert torch.equal(kk[:, :, :4], k[[2, 0]]) and kk.shape == (2, 2, 5, 5)
    SeqBuffer.use_cat = True
    try:
        c2 = KVCache()
        c2.append(k, k)
        k2, _ = c2.append(k, k)
        assert torch.equal(k2, torch.cat([k, k], 2))
    finally:
        SeqBuffer.use_cat = False


def test_left_context_mask_brute_force():
    r, left = 3, 2
    m = chunk_causal_mask(20, 20, r, left_chunks=left)
    for q in range(20):
        for s in range(20):
            assert bool(m[q, s]) == (q // r - left <= s // r <= q // r)
    sub = chunk_causal_mask(5, 12, r, query_offset=9, left_chunks=left, key_offset=8)
    assert torch.equal(sub, m[9:14, 8:20])


@pytest.mark.parametrize("seg", [1, 13, 1000])
def test_left_context_streaming_equals_full_forward(tiny_model, seg):
    m = tiny_model(langs=["de"], decoder_layers=1, encoder_left_chunks=2)
    cfg = m.cfg
    t = 157
    fb = torch.randn(1, t, 80)
    with torch.no_grad():
        full = m.encode(fb, torch.tensor([t])).states[0]
        from mmst.models import ModelConfig

        unlimited = build_model(ModelConfig.from_dict({**cfg.to_dict(), "encoder_left_chunks": 0})).eval()
        unlimited.load_state_dict(m.state_dict())
        assert not torch.allclose(unlimited.encode(fb, torch.tensor([t])).states[0], full)
        stream = m.encoder.stream()
        for start in range(0, t, seg):
            end = min(start + seg, t)
            stream.accept_frames(fb[0, start:end], finished=end == t)
    torch.testing.assert_close(stream.states[0], full, atol=1e-5, rtol=0)


def test_left_context_config_errors():
    with pytest.raises(ValueError, match="encoder_left_chunks"):
        model_config_for_size("xs", tgt_langs=["de"], vocab_size=40, lang_tag_ids={"de": 4}, encoder_left_chunks=-1)
    with pytest.raises(ValueError, match="encoder_left_chunks"):
        model_config_for_size("xs", tgt_langs=["de"], vocab_size=40, lang_tag_ids={"de": 4}, encoder_left_chunks=2,
                              encoder_attention="offline")
