"""Tests for the async strategy of the unified model: the self-attention mask against the
rule by brute force, incremental joint decoding == full masked forward, the sync-reduction property,
and streaming == batch masked decoding."""

import numpy as np
import pytest
import torch

from mmst.features import GlobalCMVN, fbank
from mmst.models.masks import async_self_mask, waitk_cross_mask
from mmst.simultaneous import StreamingTranslator, greedy_waitk_decode

torch.set_num_threads(1)

LANGS = ["de", "es", "fr"]
TAGS = {"de": 4, "es": 5, "fr": 6}
V = 30
R = 3


TINY_MODEL = dict(langs=LANGS, vocab_size=V, lang_tag_ids=TAGS, pre_decision_ratio=R, strategy="async",
                  async_delta=1, eos_scale=2.0, lang_embed_std=0.5)


def test_async_mask_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n_lang = int(rng.integers(1, 4))
        lens = rng.integers(1, 5, n_lang)
        delta = int(rng.integers(0, 3))
        j = torch.cat([torch.full((int(n),), a) for a, n in enumerate(lens)])
        i = torch.cat([torch.arange(int(n)) for n in lens])
        for cross in (True, False):
            m = async_self_mask(j, i, delta, cross)
            for q in range(len(j)):
                for k in range(len(j)):
                    tq, tk = int(j[q]) * delta + int(i[q]), int(j[k]) * delta + int(i[k])
                    same = int(j[k]) == int(j[q]) and int(i[k]) <= int(i[q])
                    before = tk < tq or (tk == tq and int(j[k]) < int(j[q]))
                    assert bool(m[q, k]) == (same or (cross and before))
    valid = torch.tensor([[True, False, True]])
    m = async_self_mask(torch.tensor([0, 0, 1]), torch.tensor([0, 1, 0]), 0, True, valid)
    assert m.shape == (1, 3, 3) and bool(m[0, 1, 1]) and not bool(m[0, 2, 1])


def _prev(m, b, lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for lang, n in zip(LANGS, lens):
        x = torch.randint(7, V, (b, n), generator=g)
        x[:, 0] = m.start_token_id(lang)
        out[lang] = x
    out["es"][1, 3:] = 1  # shorter row
    out["fr"][1, :] = 1  # missing translation
    return out


@pytest.mark.parametrize("k,delta,cross", [(1, 1, True), (2, 2, True), (None, 1, True), (2, 1, False)])
def test_incremental_async_equals_full_forward(tiny_model, k, delta, cross):
    m = tiny_model(seed=1, async_delta=delta, cross_lang_attn=cross)
    fb = torch.randn(2, 90, 80)
    fl = torch.tensor([90, 61])
    prev = _prev(m, 2, [6, 5, 7])
    with torch.no_grad():
        full = m(fb, fl, prev, waitk=k).logits
        enc = m.encode(fb, fl)
        st = m.init_decoder_state(LANGS, 2)
        got = {lang: [] for lang in LANGS}
        s = enc.states.size(1)
        # elements in (t, j) order
        elems = sorted((m.async_index(lang) * delta + i, m.async_index(lang), lang, i)
                        for lang in LANGS for i in range(prev[lang].size(1)))
        for _, _, lang, i in elems:
            mask = waitk_cross_mask(1, enc.lengths, s, m.async_lag(lang, k), R, start=i + 1)
            valid = prev[lang][:, i] != 1
            got[lang].append(m.async_step(st, lang, prev[lang][:, i : i + 1], enc.states, mask, valid))
    for lang in LANGS:
        inc = torch.cat(got[lang], dim=1)
        real = prev[lang] != 1
        torch.testing.assert_close(inc[real], full[lang][real], atol=1e-4, rtol=0)


def test_greedy_async_consistent_with_teacher_forcing(tiny_model):
    m = tiny_model(seed=5, eos_scale=3.5)  # EOS likely enough that streams end before and at the cap
    fb = torch.randn(2, 80, 80)
    fl = torch.tensor([80, 50])
    with torch.no_grad():
        hyp = greedy_waitk_decode(m, fb, fl, LANGS, 2, 0.0, 12)
        n = {lang: max(len(h) for h in hyp[lang]) + 1 for lang in LANGS}
        prev = {}
        for lang in LANGS:
            x = torch.ones(2, n[lang], dtype=torch.long)
            x[:, 0] = m.start_token_id(lang)
            for b, h in enumerate(hyp[lang]):
                x[b, 1 : 1 + len(h)] = torch.tensor(h, dtype=torch.long)
            prev[lang] = x
        full = m(fb, fl, prev, waitk=2).logits
    for lang in LANGS:
        for b, h in enumerate(hyp[lang]):
            lg = full[lang][b, : len(h) + 1].clone()
            lg[:, m.never_generate_ids()] = float("-inf")  # decoding never writes pad/bos/<lang:xx>
            pred = lg.argmax(-1).tolist()
            assert pred[: len(h)] == h
            if len(h) < 12:
                assert pred[len(h)] == 2  # EOS
    lens = [len(h) for hs in hyp.values() for h in hs]
    assert any(0 < n < 12 for n in lens) and 12 in lens  # the EOS check above ran after written tokens


def test_delta0_without_cross_lang_reduces_to_sync(tiny_model):
    a = tiny_model(seed=3, async_delta=0, cross_lang_attn=False)
    with torch.no_grad():
        a.lang_embed.weight.zero_()
    s = tiny_model(seed=3, strategy="sync")
    missing = s.load_state_dict(a.state_dict(), strict=False)
    assert missing.unexpected_keys == ["lang_embed.weight"] and not missing.missing_keys
    fb = torch.randn(2, 70, 80)
    fl = torch.tensor([70, 45])
    prev = _prev(a, 2, [5, 6, 4])
    with torch.no_grad():
        for k in (1, 3, None):
            la, ls = a(fb, fl, prev, waitk=k).logits, s(fb, fl, prev, waitk=k).logits
            for lang in LANGS:
                real = prev[lang] != 1
                torch.testing.assert_close(la[lang][real], ls[lang][real], atol=1e-5, rtol=0)
        assert greedy_waitk_decode(a, fb, fl, LANGS, 2, 0.0, 10) == greedy_waitk_decode(s, fb, fl, LANGS, 2, 0.0, 10)


CMVN = GlobalCMVN(mean=np.full(80, 5.0, np.float32), std=np.full(80, 3.0, np.float32))


def _wav(seed, seconds):
    rng = np.random.default_rng(seed)
    return (0.2 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)


@pytest.mark.parametrize(
    "k,seg_ms,seconds,seed",
    [(1, 320.0, 1.8, 4), (2, 50.0, 1.8, 4), (6, 320.0, 0.5, 4), (None, 320.0, 1.0, 4), (2, 320.0, 1.8, 7)],
)
def test_streaming_async_equals_batch(tiny_model, k, seg_ms, seconds, seed):
    m = tiny_model(seed=seed)
    if seed == 7:  # early EOS: de ends at once, es after 17 tokens, fr runs to the cap
        with torch.no_grad():
            m.decoder.embed_tokens.weight[2] *= 1.5
    rng = np.random.default_rng(seed)
    wav = (0.2 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)
    f = torch.from_numpy(CMVN(fbank(wav)))[None]
    ref = greedy_waitk_decode(m, f, torch.tensor([f.size(1)]), LANGS, k, 0.0, 20)
    tr = StreamingTranslator(m, None, LANGS, waitk=k, cmvn=CMVN, max_len_b=20)
    tr.translate(wav, seg_ms)
    assert tr.tokens == {lang: ref[lang][0] for lang in LANGS}
    if k == 1:
        # the lagging languages start later: first delay of fr (lag 2 chunks) > de's (lag 0)
        assert tr.token_delays["de"] and tr.token_delays["fr"]
        assert tr.token_delays["fr"][0] > tr.token_delays["de"][0]


def test_async_decoder_step_refuses(tiny_model):
    m = tiny_model()
    with pytest.raises(NotImplementedError):
        m.decoder_step(m.init_decoder_state(LANGS), {}, torch.zeros(1, 3, 32))


def test_batch_async_equals_single_utterances(tiny_model):
    m = tiny_model(seed=7)
    with torch.no_grad():
        m.decoder.embed_tokens.weight[2] *= 1.5
    feats = [torch.from_numpy(CMVN(fbank(_wav(s, sec)))) for s, sec in ((7, 1.8), (9, 1.2), (15, 1.5))]
    n = max(f.size(0) for f in feats)
    fb = torch.stack([torch.cat([f, torch.zeros(n - f.size(0), 80)]) for f in feats])
    fl = torch.tensor([f.size(0) for f in feats])
    batch = greedy_waitk_decode(m, fb, fl, LANGS, 2, 0.0, 20)
    lens = set()
    for b, f in enumerate(feats):
        single = greedy_waitk_decode(m, f[None], fl[b : b + 1], LANGS, 2, 0.0, 20)
        for lang in LANGS:
            assert batch[lang][b] == single[lang][0]
            lens.add(len(single[lang][0]))
    assert len(lens) > 1  # languages/rows end at different times
