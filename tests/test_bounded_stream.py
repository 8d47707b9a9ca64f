"""Endless speech: rotary encoder positions (``encoder_pos_enc_type: rope``) and the bounded state of a stream
with a bounded encoder left context (``encoder_left_chunks``) and sentence restarts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mmst.models import ModelConfig, build_model
from mmst.models.rope import apply_rotary, rotary_cos_sin
from mmst.models.stacked import run_stacked
from mmst.simultaneous import StreamingTranslator
from mmst.simultaneous.longform import state_numel


def test_rotary_angles_keep_their_precision_at_a_million_positions():
    """cos/sin of ``p * theta_j`` at p = 10^6 (angles in float64): theta_0 = 1, theta_1 = 10000^(-2/8) = 0.1; a
    float32 angle would be off by up to 0.03 rad at 10^6."""
    cos, sin = rotary_cos_sin(torch.tensor([10**6, 3]), 8)
    assert cos.shape == (2, 8) and cos.dtype == torch.float32
    for j, theta in enumerate([1.0, 0.1, 0.01, 0.001]):
        for i, p in enumerate([10**6, 3]):
            assert cos[i, j] == pytest.approx(math.cos(p * theta), abs=1e-6)
            assert cos[i, j + 4] == cos[i, j] and sin[i, j] == pytest.approx(math.sin(p * theta), abs=1e-6)
    # rotating by m then scoring against n depends only on n - m (Su et al. 2021, eq. 34)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    c, s = rotary_cos_sin(torch.tensor([5, 12, 10**6 + 5, 10**6 + 12]), 8)
    near = (apply_rotary(q, c[0], s[0]) * apply_rotary(k, c[1], s[1])).sum()
    far = (apply_rotary(q, c[2], s[2]) * apply_rotary(k, c[3], s[3])).sum()
    assert float(far) == pytest.approx(float(near), abs=1e-5)


def _rope_model(tiny_model, **kw):
    return tiny_model(langs=["de"], decoder_layers=1, encoder_left_chunks=2, encoder_pos_enc_type="rope", **kw)


def test_rope_streaming_equals_full_forward_past_the_dropped_rows(tiny_model):
    """A RoPE chunk-causal encoder with 2 left chunks: streamed states equal the full-sequence forward over a
    stream long enough (1200 frames, 300 states, fed 61 frames at a time) that the conv rows and the keys before the left context were
    dropped (cache start > 0); the sinusoidal model with the same weights gives other states."""
    m = _rope_model(tiny_model)
    t, seg = 1200, 61
    fb = torch.randn(1, t, 80)
    with torch.no_grad():
        full = m.encode(fb, torch.tensor([t])).states[0]
        absolute = build_model(ModelConfig.from_dict({**m.cfg.to_dict(), "encoder_pos_enc_type": "abs"})).eval()
        absolute.load_state_dict(m.state_dict())
        assert not torch.allclose(absolute.encode(fb, torch.tensor([t])).states[0], full, atol=1e-3)
        stream = m.encoder.stream()
        for start in range(0, t, seg):
            end = min(start + seg, t)
            stream.accept_frames(fb[0, start:end], finished=end == t)
    assert stream._cache[0].start > 0 and stream._bufs[0].start > 0
    torch.testing.assert_close(stream.states[0], full, atol=1e-5, rtol=0)


def test_rope_stacked_blocks_equal_each_stream_alone(tiny_model):
    """mmst-serve's stacked path (``EncoderBlock.run_stacked``): two RoPE streams at different stream positions
    (one 37 chunks ahead) encoded in one call per layer give each stream's own full forward."""
    m = _rope_model(tiny_model)
    fbs = [torch.randn(1, 600, 80), torch.randn(1, 156, 80)]
    with torch.no_grad():
        fulls = [m.encode(fb, torch.tensor([fb.size(1)])).states[0] for fb in fbs]
        streams = [m.encoder.stream() for _ in fbs]
        streams[0].accept_frames(fbs[0][0, :444])  # ahead of the other by 444 frames
        pos = [444, 0]
        while any(p < fb.size(1) for p, fb in zip(pos, fbs)):
            steps = []
            for i, (s, fb) in enumerate(zip(streams, fbs)):
                if pos[i] < fb.size(1):
                    end = min(pos[i] + 52, fb.size(1))
                    steps.append(s.accept_frames_steps(fb[0, pos[i]:end], finished=end == fb.size(1)))
                    pos[i] = end
            run_stacked(steps)
    for s, full in zip(streams, fulls):
        torch.testing.assert_close(s.states[0], full, atol=1e-5, rtol=0)


def test_rope_chunk_output_is_invariant_to_the_stream_offset(tiny_model):
    """The same frames encoded as stream states 0.. and as states 10^6..: equal to 1e-5 with RoPE; the
    sinusoidal model (same weights) differs, so the offset did reach the positions."""
    m = _rope_model(tiny_model)
    fb = torch.randn(1, 120, 80)
    n = torch.tensor([120])
    with torch.no_grad():
        at0 = m.encoder(fb, n).states
        far = m.encoder(fb, n, offset=10**6).states
        torch.testing.assert_close(far, at0, atol=1e-5, rtol=0)
        absolute = build_model(ModelConfig.from_dict({**m.cfg.to_dict(), "encoder_pos_enc_type": "abs"})).eval()
        absolute.load_state_dict(m.state_dict())
        assert not torch.allclose(absolute.encoder(fb, n, offset=10**6).states, absolute.encoder(fb, n).states,
                                  atol=1e-3)


def test_rope_config_errors():
    from mmst.models import model_config_for_size

    kw = dict(tgt_langs=["de"], vocab_size=40, lang_tag_ids={"de": 4})
    with pytest.raises(ValueError, match="encoder_pos_enc_type"):
        model_config_for_size("xs", encoder_pos_enc_type="relative", **kw)
    with pytest.raises(ValueError, match="encoder_pos_enc_type.*even head"):
        model_config_for_size("xs", d_model=12, attention_heads=4, encoder_pos_enc_type="rope", **kw)
    assert model_config_for_size("xs", **kw).encoder_pos_enc_type == "abs"


# ---------------------------------------------------------------------------------------- bounded state

SR = 16000
CALL_S = 12.0  # audio per accept_audio call (5 a minute)
SENTENCE_S = 12.0  # each language ends its sentence and restarts at the stream's present state this often


def state_bound(cfg, langs: int, call_s: float, sentence_s: float, max_len_b: int) -> int:
    """Most tensor elements (allocated, :func:`~mmst.simultaneous.longform.state_numel`) a translator of ``cfg``
    may hold at any time on an endless stream, with restarts every ``sentence_s`` s and audio fed
    ``call_s`` s at a time. Rows any reader may still need ("live"), per buffer:

    - conv input rows: one call's frames (100 per s) plus a kernel, at each conv rate (/1, /2, /4);
    - encoder keys/values: ``(encoder_left_chunks + chunks per call) * R`` per layer, each ``2 * D``;
    - final states and the decoder's cross keys/values: the states since the oldest restart point, one
      sentence plus one call (25 per s), ``D`` and ``2 * D * decoder_layers`` each;
    - decoder self-attention columns: at least 64 (the amortisation minimum), a sentence's inputs
      (``max_len_b`` + EOS + start) plus one rolled-back candidate per chunk read, ``2 * D * decoder_layers *
      langs`` each.

    Buffers drop their dead rows once these are as many as the live ones (at least 64) and reallocate to
    twice the live rows, and a buffer grows by doubling: at most ``4 * max(live, 64)`` rows, or its
    minimum allocation (256 conv rows). Returns the sum over buffers.
    """
    d, r, left = cfg.d_model, cfg.pre_decision_ratio, cfg.encoder_left_chunks
    frames = int(call_s * 100)
    states_call, states_sentence = int(call_s * 25), int(sentence_s * 25)

    def cap(live: int, minimum: int = 64) -> int:
        return max(minimum, 4 * max(live, 64))

    conv = [(frames + 5, cfg.input_dim), (frames // 2 + 5, cfg.conv_channels // 2), (frames // 4 + 5, d)]
    total = sum(cap(rows, 256) * width for rows, width in conv)
    total += cfg.encoder_layers * 2 * d * cap((left + states_call // r) * r)
    live_states = states_sentence + states_call
    total += d * cap(live_states) + cfg.decoder_layers * 2 * d * cap(live_states)
    columns = max_len_b + 2 + states_sentence // r
    total += cfg.decoder_layers * 2 * d * langs * cap(columns)
    return total


def test_pause_free_ten_minutes_keep_a_bounded_state(tiny_model):
    """Slow: 10 minutes of audio (60,000 fbank frames) through the real front end, encoder and decoder.

    A RoPE model with 2 left chunks, 2 languages, no pause at all: each language ends its sentence and
    restarts at the present state every 12 s (what the long-form driver does at a sentence end). The
    translator's tensor elements stay under :func:`state_bound` from minute 2 to minute 10 and do not grow
    (minute 10 is within the bound's live rows of minute 2). Without freeing, the fbank rows alone grow by
    48,000 x 80 elements over those 8 minutes and the final states by 12,000 x 32.
    """
    m = tiny_model(langs=["de", "es"], encoder_left_chunks=2, encoder_pos_enc_type="rope")
    tr = StreamingTranslator(m, None, ["de", "es"], waitk=1, max_len_b=3)
    bound = state_bound(m.cfg, 2, CALL_S, SENTENCE_S, 3)
    audio = (np.random.default_rng(0).standard_normal(int(CALL_S * SR)) * 0.1).astype(np.float32)
    per_sentence = round(SENTENCE_S / CALL_S)
    sizes, starts = {}, {}
    calls = 0
    for minute in range(1, 11):
        while calls * CALL_S < minute * 60 - 1e-9:
            tr.accept_audio(audio)
            calls += 1
            if calls % per_sentence == 0:
                for lang in tr.tgt_langs:
                    tr.end_sentence(lang)
                    tr.restart(lang, tr.frontend.num_states)
        sizes[minute] = state_numel(tr)
        starts[minute] = tr.frontend.states_start
    # 40 ms states, none lost: all but the last chunk, which waits for the conv look-ahead
    assert tr.frontend.num_states == 10 * 60 * 25 - m.cfg.pre_decision_ratio
    assert all(sizes[t] <= bound for t in range(2, 11)), (sizes, bound)
    assert sizes[10] - sizes[2] <= bound // 4, sizes
    assert starts[10] > starts[2] > 0  # the states before the restart points were freed
    assert bound < 48_000 * 80  # the bound is far below the unbounded growth


def test_a_restart_point_without_progress_falls_back_to_the_sentence_end():
    """On one endless segment a language whose restart evidence points back at its sentence's own start (the
    nearest pause is the one it started in) would never restart, and would keep every encoder state from there
    on. The scripted stream of ``test_sentence_restart`` (wait-1, 8 states per chunk, sentence j = round(lo / 24)
    written as 3 tokens and EOS) with such evidence: sentence 0 (w10-w12) ends (EOS) once 32 states were read and
    the language restarts there (state 32, 1280 ms); sentence round(32 / 24) = 1 (w13-w15) ends once 64 states
    were read, and only 160 ms of speech follow state 64 (states 64-67), less than the 200 ms a restart needs: no
    second restart. Before the fallback the language stopped after w12."""
    from test_sentence_restart import _driver, _stream

    lf = _driver()
    lf.restart_points = lambda langs: {lang: lf.translator.origin(lang) for lang in langs}  # evidence without progress
    words, ends = _stream(lf)
    assert [r.restart_ms for r in ends[0].restarts] == [32 * 40.0]
    assert [w.text for w in words] == [f"w{i}" for i in range(10, 16)]


def test_speech_track_queries_read_only_their_span_and_equal_a_brute_force():
    """SpeechTrack on an endless segment: 2,000 windows of 512 samples (every 3rd is a pause, probability 0.1;
    the others 0.9), 1,000 of them forgotten on the way (storage compacted, not grown). ``speech_ms`` and
    ``state_probs`` equal the overlap sums computed by hand over every window; a span inside the forgotten part
    counts nothing."""
    from mmst.simultaneous.restart import SpeechTrack

    w = 512
    track = SpeechTrack(threshold=0.5, window_samples=w)
    probs = [0.1 if i % 3 == 0 else 0.9 for i in range(2000)]
    for i, p in enumerate(probs):
        track.add((i + 1) * w, p)
        if i == 1499:
            track.forget_before(1000 * w)  # windows 0..999 (ending at or before sample 512,000) go
    assert track._end_buf.size <= 2048  # compacted in place, not doubled past what is kept

    def brute_ms(a, b):
        return sum(max(0, min((i + 1) * w, b) - max(i * w, a)) for i in range(1000, 2000) if probs[i] >= 0.5) / 16.0

    for a, b in [(1000 * w, 2000 * w), (1500 * w + 100, 1503 * w + 7), (1999 * w + 1, 2100 * w), (10, 900 * w)]:
        assert track.speech_ms(a, b) == pytest.approx(brute_ms(a, b))
    # states of 640 samples from sample 1,200 * 512: mean probability of the windows each overlaps, by overlap
    start, n = 1200 * w, 5
    want = []
    for j in range(n):
        a, b = start + j * 640, start + (j + 1) * 640
        ov = [(max(0, min((i + 1) * w, b) - max(i * w, a)), probs[i]) for i in range(1000, 2000)]
        want.append(sum(o * p for o, p in ov) / sum(o for o, _ in ov))
    np.testing.assert_allclose(track.state_probs(start, n, 640), want)
    assert track.speech_ms(10, 900 * w) == 0.0 and list(track.state_probs(10, 2, 640)) == [1.0, 1.0]


def test_state_probs_over_many_blocks_equal_the_overlap_weighted_mean_of_each_state():
    """``state_probs`` over 600 states of 640 samples (three blocks of STATE_BLOCK = 256 states, the span starting
    mid-window): each state's value is the overlap-weighted mean probability of the 32 ms windows it overlaps,
    computed here state by state; states before the first window get 1.0."""
    from mmst.simultaneous.restart import STATE_BLOCK, SpeechTrack

    w = 512
    rng = np.random.default_rng(0)
    probs = rng.random(1000)
    track = SpeechTrack(window_samples=w)
    for i, p in enumerate(probs):
        track.add((i + 10 + 1) * w, float(p))  # windows from sample 10 * 512 on
    start, n = 3 * w + 100, 600
    assert n > 2 * STATE_BLOCK
    want = []
    for j in range(n):
        a, b = start + j * 640, start + (j + 1) * 640
        ov = np.array([max(0, min((i + 11) * w, b) - max((i + 10) * w, a)) for i in range(1000)], dtype=float)
        want.append(float((ov * probs).sum() / ov.sum()) if ov.sum() > 0 else 1.0)
    got = track.state_probs(start, n, 640)
    assert got[0] == 1.0 and got[7] != 1.0  # state 0 ends before the first window; state 7 overlaps it
    np.testing.assert_allclose(got, want, rtol=1e-12)
