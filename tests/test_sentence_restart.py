"""Sentence restarts inside a long-form segment and the untranslated-speech measure, on known answers.

The stream: one segment of three "sentences" at 40 ms per encoder state (640 samples): speech in states
0-19, 24-43 and 48-67, pauses in 20-23, 44-47 and 68-71 (2880 ms). Every boundary falls on a 32 ms VAD
window edge, so the speech windows cover the speech exactly: 2400 ms of speech.

The scripted model (wait-1, 8 states per chunk) writes sentence ``j`` (the one its attention window starts
in: ``j = round(lo / 24)``) as tokens ``10+3j, 11+3j, 12+3j`` and then EOS; token ``t`` attends state
``24j + 6t + 5``. So each sentence's last token attends state ``24j + 17``, the nearest pause is states
``24j + 20 .. 24j + 23``, and its middle, ``24j + 22``, is where the next sentence starts: 22 (880 ms)
and 46 (1840 ms).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scripted_model import EOS, SampledFrontEnd, ScriptedModel

from mmst.simultaneous import StreamingTranslator
from mmst.simultaneous.longform import LongFormTranslator, LongFormWord, SegmentEnd
from mmst.simultaneous.restart import SpeechTrack, find_restart_point
from mmst.simultaneous.vad import VadEvent

STATE = 640  # samples per encoder state (40 ms)
WIN = 512  # samples per VAD window (32 ms)
SPEECH = [(0, 20), (24, 44), (48, 68)]  # speech states of the three sentences
N_STATES = 72
RATIO = 8  # states per chunk: 320 ms


def _is_speech(sample: int) -> bool:
    return any(a * STATE <= sample < b * STATE for a, b in SPEECH)


def script(prefix, lo, hi):
    """Sentence j = round(lo / 24): 3 tokens then EOS; token t attends state 24j + 6t + 5."""
    j = round(lo / 24)
    t = len(prefix)
    probs = {EOS: 1.0} if t >= 3 else {10 + 3 * j + t: 1.0}
    row = np.zeros(max(0, hi - lo))
    if hi > lo:
        row[min(max(24 * j + 6 * min(t, 2) + 5, lo), hi - 1) - lo] = 1.0
    return probs, row


class PieceVocab:
    """Token i is the word ``w<i>``."""

    def id_to_piece(self, i: int) -> str:
        return f"\u2581w{i}"

    def decode(self, ids) -> str:
        return " ".join(f"w{i}" for i in ids)


class ScriptedSegmenter:
    """One segment over the whole stream (start at 0, end at ``N_STATES`` states), and the speech probability
    of each 32 ms window: 0.9 inside the speech states, 0.05 in the pauses."""

    eager = False
    threshold = 0.5

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.n = 0
        self._probs: list[tuple[int, float]] = []
        self._started = False

    def accept(self, samples):
        start, self.n = self.n, self.n + len(samples)
        for end in range((start // WIN + 1) * WIN, self.n + 1, WIN):
            self._probs.append((end, 0.9 if _is_speech(end - WIN // 2) else 0.05))
        out = []
        if not self._started and self.n > 0:
            out.append(VadEvent("start", 0, self.n))
            self._started = True
        if start < N_STATES * STATE <= self.n:
            out.append(VadEvent("end", N_STATES * STATE, self.n))
        return out

    def finish(self):
        return []

    def take_window_probs(self):
        out, self._probs = self._probs, []
        return out


def _driver(policy: str = "waitk:k=1", **kw) -> LongFormTranslator:
    model = ScriptedModel(script, ratio=RATIO, windowed=True)
    tr = StreamingTranslator(model, PieceVocab(), ["de"], policy=policy)
    tr.frontend = SampledFrontEnd(RATIO, STATE)
    tr.reset()
    return LongFormTranslator(tr, vad=ScriptedSegmenter(), chunk_ms=320.0, measure_state=False, **kw)


def _stream(lf: LongFormTranslator):
    events = lf.push(np.zeros(N_STATES * STATE, np.float32)) + lf.finish()
    words = [e for e in events if isinstance(e, LongFormWord)]
    ends = [e for e in events if isinstance(e, SegmentEnd)]
    return words, ends


def test_three_sentences_in_one_segment_are_all_translated():
    """Without restarts the language stops at the first EOS (chunk 4) and sentences 2 and 3 get no word."""
    lf = _driver()
    words, ends = _stream(lf)
    assert [w.text for w in words] == [f"w{i}" for i in range(10, 19)]
    assert len(ends) == 1 and ends[0].segment == 0
    restarts = ends[0].restarts
    assert [(r.lang, r.reason) for r in restarts] == [("de", "eos"), ("de", "eos")]
    assert [r.restart_ms for r in restarts] == [22 * 40.0, 46 * 40.0]  # the middle of each pause
    assert [r.ended_ms for r in restarts] == [1280.0, 2240.0]  # EOS after 4 chunks from each start
    assert [s.origin for s in lf.translator.sentences["de"]] == [0, 22]
    assert lf.translator.origin("de") == 46
    # a word is complete when the next one starts or its sentence ends; sentence 2's first token is written
    # at chunk 4 (states 22-29 read), sentence 3's at chunk 7 (states 46-53), the rest at the segment's end
    assert [w.time_ms for w in words] == [640.0, 960.0, 1280.0, 1600.0, 1920.0, 2240.0, 2560.0, 2880.0, 2880.0]
    assert ends[0].speech_ms == pytest.approx(2400.0)
    assert ends[0].untranslated_speech_ms == {"de": 0.0}
    assert lf.untranslated_speech_share() == {"de": 0.0}


class CountingVocab(PieceVocab):
    """Records how many pieces each ``decode`` call gets."""

    def __init__(self) -> None:
        self.decoded: list[int] = []

    def decode(self, ids) -> str:
        self.decoded.append(len(ids))
        return super().decode(ids)


def test_a_restarted_character_language_decodes_only_its_new_sentence():
    """Character-level detokenisation decodes every piece of the sentence at each new piece; after a restart that
    is the new sentence's pieces (at most 3 here), not every piece of the stream (up to 9: work per piece would
    grow without bound on an endless stream)."""
    vocab = CountingVocab()
    tr = StreamingTranslator(ScriptedModel(script, ratio=RATIO, windowed=True), vocab, ["de"], policy="waitk:k=1",
                             char_langs=("de",))
    tr.frontend = SampledFrontEnd(RATIO, STATE)
    tr.reset()
    words, _ = _stream(LongFormTranslator(tr, vad=ScriptedSegmenter(), chunk_ms=320.0, measure_state=False))
    assert [w.text for w in words] == [f"w{i}" for i in range(10, 19)]
    assert len(vocab.decoded) == 9 and max(vocab.decoded) == 3


def test_untranslated_speech_share_without_restarts():
    """EOS at 1280 ms (20480 samples); speech after it: states 32-43 (480 ms) and 48-67 (800 ms) = 1280 ms of
    the segment's 2400 ms."""
    lf = _driver(restart=False)
    words, ends = _stream(lf)
    assert [w.text for w in words] == ["w10", "w11", "w12"]
    assert ends[0].restarts == ()
    assert ends[0].speech_ms == pytest.approx(2400.0)
    assert ends[0].untranslated_speech_ms == {"de": pytest.approx(1280.0)}
    assert lf.untranslated_speech_share()["de"] == pytest.approx(1280.0 / 2400.0)


def test_adaptive_policy_ends_its_sentence_after_eos_on_partial_input_for_n_chunks():
    """AlignAtt (frames=2) writes token t once it attends a state 2 before the newest: sentence 1's tokens at
    chunks 1-3; then EOS is predicted (READ) at chunks 3 and 4: the second makes the end (``eos-partial``, at
    960 ms, where the run began). Sentence 2 (from state 22): tokens at chunks 4-6, EOS at 6 and 7 (1920 ms)."""
    lf = _driver("alignatt:frames=2", restart_eos_chunks=2)
    words, ends = _stream(lf)
    assert [w.text for w in words] == [f"w{i}" for i in range(10, 19)]
    restarts = ends[0].restarts
    assert [(r.reason, r.ended_ms, r.restart_ms, r.time_ms) for r in restarts] == [
        ("eos-partial", 960.0, 880.0, 1280.0), ("eos-partial", 1920.0, 1840.0, 2240.0)]
    # without restarts the language READs on EOS to the segment's end: the loss counts from where the run of
    # EOS began (960 ms): states 24-43 and 48-67, 1600 ms of 2400
    off = _driver("alignatt:frames=2", restart=False, restart_eos_chunks=2)
    words, ends = _stream(off)
    assert [w.text for w in words] == ["w10", "w11", "w12"]
    assert ends[0].untranslated_speech_ms == {"de": pytest.approx(1600.0)}


def test_restart_point_from_a_hand_written_attention_matrix():
    """Three written tokens over 16 states; argmax rows: 2, 6, 9 -> the last two give state 10."""
    attn = torch.zeros(3, 16)
    attn[0, 2], attn[1, 6], attn[2, 9] = 0.7, 0.6, 0.5
    attn[0, 3], attn[1, 5], attn[2, 8] = 0.3, 0.4, 0.5 - 1e-3
    assert find_restart_point(attn) == 10
    assert find_restart_point(attn, last_tokens=1) == 10
    assert find_restart_point(attn[:2], last_tokens=2) == 7
    # CTC: tokens emitted at states 4-5 (label 7) and 11 (label 3); token ends at 6 and 12: nearest to 10 is 12
    labels = torch.tensor([0, 0, 0, 0, 7, 7, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0])
    assert find_restart_point(attn, ctc_labels=labels, blank=0) == 12
    # VAD: a pause in states 13-15 (middle 14) beats none; the pause nearest to the point wins
    prob = np.full(16, 0.9)
    prob[13:16] = 0.1
    assert find_restart_point(attn, ctc_labels=labels, speech_prob=prob) == 14
    prob[1:3] = 0.1  # a second pause, farther from 12
    assert find_restart_point(attn, ctc_labels=labels, speech_prob=prob) == 14
    # no pause within 3 states of 12 (states 9-15 all speech): the same sentence goes on, no point
    prob[13:16] = 0.9
    assert find_restart_point(attn, ctc_labels=labels, speech_prob=prob, window_states=3) is None
    assert find_restart_point(attn, ctc_labels=labels, speech_prob=prob) == 2  # the pause 1-2 is within 10
    assert find_restart_point(torch.zeros(0, 16)) is None


def test_speech_track_counts_speech_windows_by_overlap():
    tr = SpeechTrack(threshold=0.5, window_samples=512, sample_rate=16000)
    for k, p in enumerate([0.9, 0.2, 0.9, 0.6]):  # windows [0,512) [512,1024) [1024,1536) [1536,2048)
        tr.add((k + 1) * 512, p)
    assert tr.speech_ms(0, 2048) == pytest.approx(3 * 32.0)
    assert tr.speech_ms(256, 1280) == pytest.approx((256 + 256) / 16.0)
    np.testing.assert_allclose(tr.state_probs(0, 2, 1024), [(0.9 + 0.2) / 2, (0.9 + 0.6) / 2])


def test_serve_summary_and_stats_read_the_drivers_share():
    """mmst-serve reads the measure from its drivers: a stream's summary has its own share, the stats pool the
    open streams' speech (0 ms and 1280 ms untranslated of 2400 ms each: 1280 / 4800)."""
    from mmst.serve.protocol import StartRequest
    from mmst.serve.session import StreamSession
    from mmst.simultaneous.longform import pooled_untranslated_share

    on, off = _driver(), _driver(restart=False)
    _stream(on), _stream(off)
    summary = StreamSession(off, StartRequest(("de",), 16000, "f32")).summary()
    assert summary["untranslated_speech_share"] == {"de": round(1280.0 / 2400.0, 4)}
    assert pooled_untranslated_share([on, off]) == {"de": pytest.approx(1280.0 / 4800.0)}


def _scripted_translator(policy: str = "waitk:k=1") -> StreamingTranslator:
    tr = StreamingTranslator(ScriptedModel(script, ratio=RATIO, windowed=True), PieceVocab(), ["de"], policy=policy)
    tr.frontend = SampledFrontEnd(RATIO, STATE)
    tr.reset()
    return tr


@pytest.mark.parametrize("restart", [True, False])
def test_serve_drivers_restart_with_the_options_of_mmst_serve(restart, monkeypatch):
    """mmst-serve's drivers (DriverPool, built from --sentence-restart etc.) restart inside a segment: the one
    segment of three sentences gives all three (the known words and restart points of the first test);
    --no-sentence-restart gives only the first."""
    from mmst.cli_help import restart_options
    from mmst.serve.cli import build_parser
    from mmst.serve.drivers import DriverPool
    from mmst.simultaneous import vad as vad_module

    class Bundle:
        def translator(self, **kw):
            return _scripted_translator(kw["policy"]["de"])

    monkeypatch.setattr(vad_module, "StreamingVad", lambda **kw: ScriptedSegmenter())
    argv = ["--model", "M", "--restart-min-speech-ms", "200"] + ([] if restart else ["--no-sentence-restart"])
    pool = DriverPool(Bundle(), {"de": "waitk:k=1"}, vad={}, vad_model=object(),
                      restart=restart_options(build_parser().parse_args(argv)))
    words, ends = _stream(pool(["de"]))
    if restart:
        assert [w.text for w in words] == [f"w{i}" for i in range(10, 19)]
        assert [r.restart_ms for r in ends[0].restarts] == [22 * 40.0, 46 * 40.0]
    else:
        assert [w.text for w in words] == ["w10", "w11", "w12"] and ends[0].restarts == ()


def test_restart_options_have_one_name_and_default_everywhere():
    """mmst-eval-longform, mmst-serve and the SimulEval agent parse the same restart options to the driver's
    defaults; a bad value is refused."""
    from argparse import ArgumentParser

    from mmst.agents import MMSTSpeechToTextAgent
    from mmst.cli.longform_eval import build_parser as longform_parser
    from mmst.cli_help import restart_options
    from mmst.serve.cli import build_parser as serve_parser

    agent = ArgumentParser()
    MMSTSpeechToTextAgent.add_args(agent)
    defaults = {"restart": True, "restart_min_speech_ms": 200.0, "restart_eos_chunks": 6}
    lf = LongFormTranslator(_scripted_translator(), vad=ScriptedSegmenter())
    assert defaults == {"restart": lf.restart, "restart_min_speech_ms": lf.restart_min_speech_ms,
                        "restart_eos_chunks": lf.restart_eos_chunks}
    for p, base in ((longform_parser(), ["--model", "M", "--audio", "a.wav", "--out", "o"]), (serve_parser(), ["--model", "M"]),
                    (agent, [])):
        assert restart_options(p.parse_args(base)) == defaults
        assert restart_options(p.parse_args([*base, "--no-sentence-restart", "--restart-eos-chunks", "3"])) == dict(
            defaults, restart=False, restart_eos_chunks=3)
        with pytest.raises(ValueError, match="restart-eos-chunks"):
            restart_options(p.parse_args([*base, "--restart-eos-chunks", "0"]))


@pytest.mark.parametrize("restart", [True, False])
def test_simuleval_agent_translates_every_sentence_of_an_instance(restart):
    """The SimulEval agent drives an instance through the long-form driver as one segment: on the three-sentence
    stream it writes the nine words with the first test's delays (640 ms ... 2880 ms); without restarts, only
    the first sentence."""
    from argparse import Namespace

    from simuleval.data.segments import EmptySegment, SpeechSegment

    from mmst.agents import MMSTSpeechToTextAgent

    args = Namespace(tgt_lang="de", input_scale="float", sentence_restart=restart, restart_min_speech_ms=200.0,
                     restart_eos_chunks=2)
    agent = MMSTSpeechToTextAgent(args, translator=_scripted_translator(), speech=ScriptedSegmenter())
    audio, n, delays, words = np.zeros(N_STATES * STATE, np.float32), 5120, [], []
    for step in range(0, audio.size + 1, n):
        seg = (SpeechSegment(content=audio[step:step + n].tolist(), sample_rate=16000,
                             finished=step + n >= audio.size, tgt_lang="de")
               if step < audio.size else EmptySegment(finished=True))
        out = agent.pushpop(seg)
        if not out.is_empty and out.content:
            words += out.content.split()
            delays += [min(step + n, audio.size) / 16.0] * len(out.content.split())
        if seg.finished:
            break
    if restart:
        assert words == [f"w{i}" for i in range(10, 19)]
        assert delays == [640.0, 960.0, 1280.0, 1600.0, 1920.0, 2240.0, 2560.0, 2880.0, 2880.0]
    else:
        assert words == ["w10", "w11", "w12"]


@pytest.mark.parametrize("arch", ["unified", "separate"])
def test_batched_sentence_evidence_equals_each_language_alone_through_the_full_decoder(tiny_model, arch, monkeypatch):
    """The restart evidence of several languages at once (one decoder call for a unified model, rows right-padded,
    each row's cross-attention masked to its own window, layers above the asked one not computed) equals, per
    language, the attention that a full incremental ``step`` over that language's sentence and window alone
    stores (``attn_layers``): 3 languages with 5, 2 and 7 tokens over windows [0, 9), [4, 12) and [2, 6) of 12
    random states, layers 1, 0 and 1."""
    from mmst.simultaneous import continuation
    from mmst.simultaneous.continuation import forced_cross_attention_rows

    model = tiny_model(arch=arch)
    torch.manual_seed(3)
    states = torch.randn(1, 12, 32)
    rows = {"de": [7, 8, 9, 10, 11], "es": [12, 13], "fr": [14, 15, 16, 17, 18, 19, 20]}
    windows = {"de": (0, 9), "es": (4, 12), "fr": (2, 6)}
    layers = {"de": 1, "es": 0, "fr": 1}
    calls = []
    for name in ("_layer_attention", "forced_cross_attention"):  # count the decoder calls (rows of each)
        real = getattr(continuation, name)
        monkeypatch.setattr(continuation, name, lambda *a, _real=real, _rows=(name == "_layer_attention"), **k:
                            calls.append(a[1].size(0) if _rows else 1) or _real(*a, **k))
    got = forced_cross_attention_rows(model, rows, states, windows, layers)
    # unified: one call per layer asked (rows de+fr at layer 1, es at layer 0); separate: one per language
    assert sorted(calls) == ([1, 2] if arch == "unified" else [1, 1, 1])
    for lang, toks in rows.items():
        dec = model.decoder_for(lang)
        st = dec.init_state()
        lo, hi = windows[lang]
        x = torch.tensor([[model.start_token_id(lang)] + toks[:-1]])
        with torch.no_grad():
            dec.step(x, st, states[:, lo:hi], attn_layers=(layers[lang],))
        want = st.cross_attn[layers[lang]][0].mean(dim=0)  # (T, hi - lo)
        assert got[lang].shape == (len(toks), hi - lo)
        torch.testing.assert_close(got[lang], want, atol=1e-6, rtol=1e-5)
        assert torch.allclose(got[lang].sum(-1), torch.ones(len(toks)), atol=1e-5)  # normalised over its window only
