"""Tests for mmst.models: config round trip, shapes, batch invariance, incremental encoder == full
forward, wait-k masked forward == step-by-step incremental decoding, unified == per-language runs."""

import pytest
import torch

from mmst.models import (
    EncoderOut,
    ModelConfig,
    build_model,
    model_config_for_size,
)

torch.set_num_threads(1)

LANGS = ["de", "es", "fr"]
TAGS = {"de": 4, "es": 5, "fr": 6}
V = 40


TINY_MODEL = dict(langs=LANGS, vocab_size=V, lang_tag_ids=TAGS)


def test_config_round_trip_and_errors(tiny_model_cfg):
    cfg = tiny_model_cfg("separate", vocab_sizes={"de": 30})
    d = cfg.to_dict()
    assert ModelConfig.from_dict(d) == cfg
    assert cfg.lang_vocab_size("de") == 30 and cfg.lang_vocab_size("es") == V
    with pytest.raises(ValueError, match="bogus"):
        ModelConfig.from_dict({**d, "bogus": 1})
    with pytest.raises(ValueError, match="lang_tag_ids"):
        model_config_for_size("xs", arch="unified", tgt_langs=["de"], vocab_size=50)
    with pytest.raises(ValueError, match="encoder_attention"):
        tiny_model_cfg(encoder_attention="sideways")
    with pytest.raises(ValueError, match="size"):
        model_config_for_size("xxl", tgt_langs=["de"], vocab_size=50)
    with pytest.raises(ValueError, match="d_model"):
        tiny_model_cfg(d_model=30)


def test_sizes_param_counts():
    for size, lo, hi in (("xs", 3e6, 6e6), ("s", 25e6, 32e6)):
        cfg = model_config_for_size(size, tgt_langs=["de", "es", "fr", "ja"], vocab_size=1000,
                                    lang_tag_ids={"de": 4, "es": 5, "fr": 6, "ja": 7})
        n = build_model(cfg).num_parameters()
        assert lo < n < hi, (size, n)


@pytest.mark.parametrize("arch", ["unified", "separate"])
def test_forward_shapes_and_api(tiny_model, arch):
    m = tiny_model(arch, src_vocab_size=20)
    assert m.tgt_langs == LANGS and m.pre_decision_ratio == 3
    assert m.start_token_id("de") == (4 if arch == "unified" else 0)
    with pytest.raises(ValueError):
        m.start_token_id("xx")
    fb = torch.randn(2, 50, 80)
    fl = torch.tensor([50, 31])
    prev = {"de": torch.randint(3, V, (2, 5)), "fr": torch.randint(3, V, (2, 7))}
    out = m(fb, fl, prev, waitk=2)
    assert isinstance(out.encoder_out, EncoderOut)
    assert out.logits["de"].shape == (2, 5, V) and out.logits["fr"].shape == (2, 7, V)
    assert out.encoder_out.lengths.tolist() == [13, 8]
    assert out.ctc_logits.shape == (2, 13, 20)
    with pytest.raises(ValueError):
        m(fb, fl, {"xx": prev["de"]})


@pytest.mark.parametrize("mode", ["chunk-causal", "offline"])
def test_batch_padding_invariance(tiny_model, mode):
    m = tiny_model(encoder_attention=mode)
    fb = torch.randn(3, 61, 80)
    fl = torch.tensor([61, 40, 9])
    prev = {lang: torch.randint(3, V, (3, 6)) for lang in LANGS}
    with torch.no_grad():
        out = m(fb, fl, prev, waitk=2)
        for b in range(3):
            t = int(fl[b])
            single = m(fb[b : b + 1, :t], fl[b : b + 1], {k: v[b : b + 1] for k, v in prev.items()}, waitk=2)
            s = int(out.encoder_out.lengths[b])
            torch.testing.assert_close(out.encoder_out.states[b, :s], single.encoder_out.states[0], atol=1e-5, rtol=0)
            for lang in LANGS:
                torch.testing.assert_close(out.logits[lang][b], single.logits[lang][0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("seg", [1, 7, 13, 32, 1000])
def test_incremental_encoder_equals_full_forward(tiny_model, seg):
    m = tiny_model()
    t = 97  # -> 25 states = 8 chunks of 3 + partial chunk of 1
    fb = torch.randn(1, t, 80)
    with torch.no_grad():
        full = m.encode(fb, torch.tensor([t])).states[0]
        stream = m.encoder.stream()
        prev_states = None
        for start in range(0, t, seg):
            end = min(start + seg, t)
            new = stream.accept_frames(fb[0, start:end], finished=end == t)
            if end < t:
                assert new.size(1) % m.pre_decision_ratio == 0  # whole chunks only
            cur = stream.states[0]
            if prev_states is not None:  # prefix states never change
                assert torch.equal(cur[: prev_states.size(0)], prev_states)
            # every emitted state equals the full forward
            torch.testing.assert_close(cur, full[: cur.size(0)], atol=1e-5, rtol=0)
            prev_states = cur.clone()
    assert stream.num_states == full.size(0) == 25 and stream.num_chunks == 9


def test_incremental_encoder_lookahead(tiny_model):
    """Chunk j is final once 4*j*R + 3 frames (conv look-ahead) have arrived (k=5 convs, R=3)."""
    m = tiny_model()
    stream = m.encoder.stream()
    fb = torch.randn(40, 80)
    with torch.no_grad():
        stream.accept_frames(fb[: 4 * 3 + 2])
        assert stream.num_states == 0
        stream.accept_frames(fb[14:15])
        assert stream.num_states == 3


def test_incremental_encoder_rejects_offline(tiny_model):
    m = tiny_model(encoder_attention="offline")
    with pytest.raises(ValueError):
        m.encoder.stream()


def _waitk_incremental_logits(m, fb, langs, prev, k):
    """Step-by-step decoding: token i sees the encoder prefix of min(k+i-1, n_chunks) chunks, fed
    from the streaming encoder."""
    r = m.pre_decision_ratio
    t = fb.size(1)
    stream = m.encoder.stream()
    with torch.no_grad():
        stream.accept_frames(fb[0], finished=True)
    states = stream.states
    s = states.size(1)
    state = m.init_decoder_state(langs, 1)
    steps = {lang: [] for lang in langs}
    with torch.no_grad():
        for i in range(1, prev[langs[0]].size(1) + 1):
            n = min((k + i - 1) * r, s)
            out = m.decoder_step(state, {lang: prev[lang][:, i - 1 : i] for lang in langs}, states[:, :n])
            for lang in langs:
                steps[lang].append(out[lang])
    del t
    return {lang: torch.cat(v, dim=1) for lang, v in steps.items()}


@pytest.mark.parametrize("arch", ["unified", "separate"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_waitk_masked_forward_equals_incremental(tiny_model, arch, k):
    m = tiny_model(arch, seed=1)
    fb = torch.randn(1, 83, 80)  # 21 states = 7 chunks
    prev = {lang: torch.cat([torch.tensor([[m.start_token_id(lang)]]), torch.randint(3, V, (1, 11))], 1)
            for lang in LANGS}
    with torch.no_grad():
        full = m(fb, torch.tensor([83]), prev, waitk=k).logits
    inc = _waitk_incremental_logits(m, fb, LANGS, prev, k)
    for lang in LANGS:
        torch.testing.assert_close(inc[lang], full[lang], atol=1e-4, rtol=0)
    # the mask matters: offline logits differ
    with torch.no_grad():
        off = m(fb, torch.tensor([83]), prev, waitk=None).logits
    assert not torch.allclose(off["de"], full["de"], atol=1e-4)


def test_unified_joint_equals_single_language_runs(tiny_model):
    m = tiny_model("unified", seed=2)
    fb = torch.randn(2, 70, 80)
    fl = torch.tensor([70, 55])
    prev = {lang: torch.randint(3, V, (2, 6)) for lang in LANGS}
    with torch.no_grad():
        joint = m(fb, fl, prev, waitk=2).logits
        for lang in LANGS:
            single = m(fb, fl, {lang: prev[lang]}, waitk=2).logits[lang]
            torch.testing.assert_close(joint[lang], single, atol=1e-5, rtol=0)


def test_different_target_lengths_unified(tiny_model):
    m = tiny_model("unified")
    fb = torch.randn(1, 40, 80)
    prev = {"de": torch.randint(3, V, (1, 3)), "es": torch.randint(3, V, (1, 9))}
    with torch.no_grad():
        out = m(fb, torch.tensor([40]), prev).logits
        de = m(fb, torch.tensor([40]), {"de": prev["de"]}).logits["de"]
    assert out["es"].shape == (1, 9, V)
    torch.testing.assert_close(out["de"], de, atol=1e-5, rtol=0)


def test_backward_and_tied_embeddings(tiny_model):
    m = tiny_model("separate", dropout=0.1)
    m.train()
    fb = torch.randn(2, 30, 80)
    prev = {lang: torch.randint(3, V, (2, 4)) for lang in LANGS}
    out = m(fb, torch.tensor([30, 20]), prev, waitk=1)
    sum(v.sum() for v in out.logits.values()).backward()
    dec = m.decoders["de"]
    assert dec.output_projection.weight is dec.embed_tokens.weight
    assert m.encoder.subsample.conv_layers[0].weight.grad is not None


@pytest.mark.parametrize("mask_batch", ["q", "k", "none"])
def test_attention_fold_equals_expanded_keys(mask_batch):
    from mmst.models.layers import MultiheadAttention

    torch.manual_seed(0)
    att = MultiheadAttention(16, 4).eval()
    g, bk, n, s = 3, 2, 5, 7
    q = torch.randn(g * bk, n, 16)
    kv_in = torch.randn(bk, s, 16)
    mask = None
    if mask_batch != "none":
        mask = torch.rand(g * bk if mask_batch == "q" else bk, n, s) > 0.4
        mask[..., 0] = True
    folded = att(q, kv_in, attn_mask=mask)
    kv_rep = kv_in.repeat(g, 1, 1)  # row g*bk + b -> utterance b
    mask_rep = None if mask is None else (mask if mask_batch == "q" else mask.repeat(g, 1, 1))
    ref = att(q, kv_rep, attn_mask=mask_rep)
    torch.testing.assert_close(folded, ref, atol=1e-6, rtol=0)
