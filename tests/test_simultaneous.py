"""Tests for mmst.simultaneous: streaming == masked full-sequence greedy wait-k, joint == single,
short sources, re-encoding, offline decoding, detokenisation with delays."""

import numpy as np
import pytest
import torch

from mmst.features import GlobalCMVN, fbank
from mmst.simultaneous import (
    Detokenizer,
    StreamingTranslator,
    WaitKPolicy,
    beam_search,
    decode_offline,
    greedy_waitk_decode,
)

torch.set_num_threads(1)

LANGS = ["de", "es", "ja"]
TAGS = {"de": 4, "es": 5, "ja": 6}
V = 30
R = 3  # 120 ms chunks


TINY_MODEL = dict(langs=LANGS, vocab_size=V, lang_tag_ids=TAGS, pre_decision_ratio=R, eos_scale=2.0)


def audio(seconds, seed=0):
    rng = np.random.default_rng(seed)
    n = int(seconds * 16000)
    t = np.arange(n) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t * (1 + t)) + 0.05 * rng.standard_normal(n)).astype(np.float32)


CMVN = GlobalCMVN(mean=np.full(80, 5.0, np.float32), std=np.full(80, 3.0, np.float32))


def full_greedy(model, wav, langs, k, max_len_b):
    f = torch.from_numpy(CMVN(fbank(wav)))[None]
    return greedy_waitk_decode(model, f, torch.tensor([f.size(1)]), langs, k, 0.0, max_len_b)


def stream_tokens(model, wav, langs, k, max_len_b, seg_ms=320.0, mode="auto"):
    tr = StreamingTranslator(model, None, langs, waitk=k, cmvn=CMVN, max_len_b=max_len_b, encoder_mode=mode)
    tr.translate(wav, seg_ms)
    return tr


@pytest.mark.parametrize("arch", ["unified", "separate"])
@pytest.mark.parametrize("k,seg_ms,seed", [(1, 320.0, 1), (3, 100.0, 3), (2, 37.0, 10)])
def test_streaming_equals_masked_greedy(tiny_model, arch, k, seg_ms, seed):
    m = tiny_model(arch, seed=seed)
    wav = audio(1.9, seed=k)
    ref = full_greedy(m, wav, LANGS, k, max_len_b=30)
    tr = stream_tokens(m, wav, LANGS, k, 30, seg_ms)
    for lang in LANGS:
        assert tr.tokens[lang] == ref[lang][0], lang
    assert any(len(ref[lang][0]) > 0 for lang in LANGS)


def test_reencode_mode_gives_same_tokens_for_chunk_causal(tiny_model):
    m = tiny_model(seed=3)
    wav = audio(1.5, seed=3)
    a = stream_tokens(m, wav, LANGS, 2, 20, mode="incremental")
    b = stream_tokens(m, wav, LANGS, 2, 20, mode="reencode")
    assert a.tokens == b.tokens and a.token_delays == b.token_delays


@pytest.mark.parametrize("arch", ["unified", "separate"])
def test_joint_equals_single_language_runs(tiny_model, arch):
    m = tiny_model(arch, seed=5)
    wav = audio(1.7, seed=5)
    joint = stream_tokens(m, wav, LANGS, 2, 25)
    for lang in LANGS:
        single = stream_tokens(m, wav, [lang], 2, 25)
        assert single.tokens[lang] == joint.tokens[lang]
        assert single.token_delays[lang] == joint.token_delays[lang]


def test_short_source_gives_full_output(tiny_model):
    m = tiny_model(seed=6)
    wav = audio(0.4, seed=6)  # 38 frames -> 10 states -> 4 chunks < k
    k = 8
    ref = full_greedy(m, wav, LANGS, k, 15)
    tr = stream_tokens(m, wav, LANGS, k, 15)
    for lang in LANGS:
        assert tr.tokens[lang] == ref[lang][0]
        assert all(d == pytest.approx(400.0) for d in tr.token_delays[lang])  # all written at the end
    assert max(len(tr.tokens[lang]) for lang in LANGS) > 0


def test_delays_follow_waitk_schedule(tiny_model):
    m = tiny_model(seed=7)
    wav = audio(2.0, seed=7)
    k = 2
    tr = stream_tokens(m, wav, ["de"], k, 40, seg_ms=40.0)
    delays = tr.token_delays["de"]
    assert delays == sorted(delays)
    pol = WaitKPolicy(k, R)
    for i, d in enumerate(delays, start=1):
        if d < 2000.0:
            # chunk c is final once 4*c*R + 3 frames exist: (4cR+2)*10 + 25 ms of audio
            need_ms = (4 * (k + i - 1) * R + 2) * 10 + 25
            assert d >= need_ms and d < need_ms + 40.0 + 1e-6, (i, d, need_ms)
    assert pol.visible_states(1, 100) == k * R


def test_offline_waitk_none_and_beam(tiny_model):
    m = tiny_model(seed=8)
    wav = audio(1.2, seed=8)
    ref = full_greedy(m, wav, LANGS, None, 12)
    tr = stream_tokens(m, wav, LANGS, None, 12)
    assert tr.tokens == {lang: ref[lang][0] for lang in LANGS}
    assert all(d == pytest.approx(1200.0) for d in tr.token_delays["de"])
    f = torch.from_numpy(CMVN(fbank(wav)))[None]
    fl = torch.tensor([f.size(1)])
    hyp = decode_offline(m, f, fl, ["de", "es"], beam=4, max_len_b=12)
    assert set(hyp) == {"de", "es"} and all(len(h[0]) <= 12 for h in hyp.values())
    enc = m.encode(torch.cat([f, f]), torch.cat([fl, fl - 20]))
    hb = beam_search(m, enc, "es", beam=3, max_len_b=10)
    assert len(hb) == 2 and all(2 not in h and 1 not in h for h in hb)
    tr_b = StreamingTranslator(m, None, ["es"], waitk=None, cmvn=CMVN, max_len_b=12, beam=4)
    tr_b.translate(wav)
    assert tr_b.tokens["es"] == hyp["es"][0]


def test_offline_encoder_reencodes_and_respects_policy(tiny_model):
    m = tiny_model(seed=9, encoder_attention="offline")
    with pytest.raises(ValueError):
        StreamingTranslator(m, None, LANGS, waitk=2, encoder_mode="incremental")
    tr = StreamingTranslator(m, None, ["de"], waitk=3, cmvn=CMVN, max_len_b=20, min_len=3)
    wav = audio(1.5)
    tr.accept_audio(wav[:3000])  # 187 ms < 3 chunks of 120 ms (+ look-ahead)
    assert tr.tokens["de"] == []
    tr.accept_audio(wav[3000:], finished=True)
    assert len(tr.tokens["de"]) >= 3


def test_empty_and_tiny_audio_and_reset(tiny_model):
    m = tiny_model(seed=10)
    tr = StreamingTranslator(m, None, LANGS, waitk=2, cmvn=CMVN, max_len_b=10)
    assert tr.accept_audio(np.zeros(0, np.float32), finished=True) == {lang: [] for lang in LANGS}
    tr.reset()
    tr.accept_audio(np.zeros(100, np.float32), finished=True)
    assert tr.tokens == {lang: [] for lang in LANGS}
    with pytest.raises(ValueError):
        tr.accept_audio(np.zeros(10, np.float32))
    wav = audio(1.0)
    a = dict(tr.translate(wav))
    ta = {k: list(v) for k, v in tr.tokens.items()}
    tr.translate(wav)
    assert tr.tokens == ta and a.keys() == set(LANGS)
    with pytest.raises(ValueError):
        StreamingTranslator(m, None, ["xx"])


class FakeVocab:
    """Pieces: 0-3 specials, 4-6 tags, then words."""

    pieces = ["<s>", "<pad>", "</s>", "<unk>", "<lang:de>", "<lang:es>", "<lang:ja>",
              "▁hel", "lo", "▁wor", "ld", "▁", "日本", "語", "▁a"] + [f"▁w{i}" if i % 2 else f"x{i}" for i in range(15, V)]

    def id_to_piece(self, i):
        return self.pieces[i]

    def decode(self, ids):
        s = "".join(self.pieces[i] for i in ids if i > 6)
        return s.replace("▁", " ").strip()


def test_detokenizer_words_and_delays():
    d = Detokenizer(FakeVocab())
    assert d.push(7, 100, 1) == []
    assert d.push(8, 200, 2) == []
    w = d.push(9, 300, 3)
    assert [(x.text, x.delay_ms, x.compute_ms) for x in w] == [("hello", 200, 2)]
    assert d.push(10, 400, 4) == []
    assert d.push(2, 450, 5) == []  # eos piece has no ▁: stays in the word, decoded away
    last = d.flush()
    assert [(x.text, x.delay_ms) for x in last] == [("world", 450)]
    c = Detokenizer(FakeVocab(), char_level=True)
    assert [x.text for x in c.push(12, 100, 1)] == ["日本"]
    assert [x.text for x in c.push(13, 200, 2)] == ["語"]
    assert c.flush() == []


def test_translator_words_with_fake_vocab(tiny_model):
    m = tiny_model(seed=11)
    tr = StreamingTranslator(m, FakeVocab(), ["de", "ja"], waitk=1, cmvn=CMVN, max_len_b=15)
    words = tr.translate(audio(1.0))
    for lang in ("de", "ja"):
        text = "".join(w.text for w in words[lang])
        toks = tr.tokens[lang]
        assert text == FakeVocab().decode(toks).replace(" ", "")
        assert all(w.delay_ms <= 1000.0 for w in words[lang])


@pytest.mark.parametrize("strategy", ["sync", "async"])
def test_special_tokens_are_never_generated(tiny_model, strategy):
    """An undertrained model whose argmax is a <lang:xx> tag, pad or bos must still write real tokens:
    every decoding path (streaming joint, masked greedy, beam) bans model.never_generate_ids()."""
    m = tiny_model("unified", strategy=strategy)
    banned = m.never_generate_ids()
    assert banned == sorted({0, 1, *TAGS.values()})  # bos, pad and the three tags; EOS (2) is allowed
    boost = torch.zeros(V)
    boost[banned] = 100.0  # the raw argmax is a banned id at every step
    m.decoder.output_projection.register_forward_hook(lambda mod, inp, out: out + boost)
    wav = audio(1.5)
    tr = stream_tokens(m, wav, LANGS, 2, max_len_b=6)
    f = torch.from_numpy(CMVN(fbank(wav)))[None]
    greedy = greedy_waitk_decode(m, f, torch.tensor([f.size(1)]), LANGS, 2, 0.0, 6)
    enc = m.encode(f, torch.tensor([f.size(1)]))
    for lang in LANGS:
        for toks in (tr.tokens[lang], greedy[lang][0], beam_search(m, enc, lang, beam=2, max_len_b=6)[0]):
            assert toks and not set(toks) & set(banned), (lang, toks)


def test_last_word_flushed_when_language_writes_eos(tiny_model, monkeypatch):
    """A language that writes EOS long before the source ends gets its last word at that moment:
    its delay is when it was written, not the source length."""
    import mmst.simultaneous.joint as joint_mod
    from mmst.evaluation.streaming import stream_utterance

    script = iter([7, 8, 2])  # "▁hel" "lo" </s>: the word "hello" is only complete at EOS

    def forced(lg, banned, eos, suppress_eos):
        out = torch.full_like(lg, -1e9)
        out[next(script)] = 0.0
        return out

    monkeypatch.setattr(joint_mod, "constrain_logits", forced)
    tr = StreamingTranslator(tiny_model(seed=3), FakeVocab(), ["de"], waitk=1, cmvn=CMVN, max_len_b=20)
    res = stream_utterance(tr, audio(4.0), ["de"], segment_ms=320.0)
    assert res.per_lang["de"].units == ["hello"]
    assert res.per_lang["de"].delays[0] <= 1000.0  # written within the first second, not 4000 ms
    assert res.source_length_ms == 4000.0
