"""Cross-stream batching (mmst.models.stacked, mmst.serve.batching): stacked model calls equal the calls
made alone, and streams stepped together write exactly the words each writes alone, the server's and
the offline long-form CLI's.

Model level: the encoder blocks and decoder steps of streams whose caches have different lengths (and
decoder rows with rolled-back columns, different visible states) give, stacked with padding + masks,
the same states / logits / attention as alone. Stream level: three streams of DIFFERENT audio (so
mixed-up slices would show), different lengths and start times, stepped by ``run_stacked``.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
import torch
from serve_fixtures import driver_factory, longform_cli_words, offline_words, speech

from mmst.models.decoder import DecoderStep
from mmst.models.stacked import StackStats, run_alone, run_stacked

TINY_MODEL = {"arch": "unified", "encoder_attention": "chunk-causal", "pre_decision_ratio": 2}


def _feats(seed: int, n: int) -> torch.Tensor:
    return torch.randn(n, 80, generator=torch.Generator().manual_seed(seed))


def test_stacked_encoder_blocks_equal_alone(tiny_model):
    """Three streams with caches of 0, 6 and 14 states; blocks of 1, 2 and 3 chunks stacked."""
    m = tiny_model()
    pre = [0, 40, 72]  # frames already encoded per stream
    new = [40, 16, 30]
    alone, stacked = [], []
    for i in range(3):
        a, b = m.encoder.stream(), m.encoder.stream()
        if pre[i]:
            a.accept_frames(_feats(i, pre[i]))
            b.accept_frames(_feats(i, pre[i]))
        alone.append(a)
        stacked.append(b)
    want = [s.accept_frames(_feats(10 + i, new[i])) for i, s in enumerate(alone)]
    gens = [s.accept_frames_steps(_feats(10 + i, new[i])) for i, s in enumerate(stacked)]
    stats = StackStats()
    got = run_stacked(gens, stats)
    assert stats.by_kind == {"EncoderBlock": [1, 3]}  # one call served all three
    for w, (g, err), a, b in zip(want, got, alone, stacked):
        assert err is None and g.shape == w.shape and w.size(1) > 0
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
        assert a.num_states == b.num_states
        torch.testing.assert_close(b.states, a.states, atol=1e-5, rtol=1e-5)


def test_stacked_front_end_equals_alone(tiny_model):
    """CMVN + conv subsampler of four streams in one call: streams with 0, 37 and 90 frames already
    seen, 41, 16, 3 and 0 new frames, the last two finishing their source (the end's zero padding): the
    conv outputs, then the encoder states, equal those of each stream alone, which equal
    ``EncoderStream.accept_frames`` (the model's own path)."""
    from mmst.features import GlobalCMVN
    from mmst.simultaneous.frontend_request import FrontEndFrames

    m = tiny_model()
    g = torch.Generator().manual_seed(3)
    cmvn = GlobalCMVN(mean=torch.randn(80, generator=g).numpy(), std=(torch.rand(80, generator=g) + 0.5).numpy())
    pre, new, fin = [0, 37, 90, 20], [41, 16, 3, 0], [False, False, True, True]

    def feats(i: int, n: int) -> np.ndarray:
        return _feats(100 + i, n).numpy()

    def streams():
        out = []
        for i in range(4):
            s = m.encoder.stream()
            if pre[i]:
                FrontEndFrames(s, feats(i, pre[i]), cmvn).run()
                run_alone(s.accept_frames_steps(np.zeros((0, 80), np.float32)))
            out.append(s)
        return out

    model_path, alone, stacked = streams(), streams(), streams()
    reqs_alone = [FrontEndFrames(s, feats(10 + i, new[i]), cmvn, fin[i]) for i, s in enumerate(alone)]
    reqs = [FrontEndFrames(s, feats(10 + i, new[i]), cmvn, fin[i]) for i, s in enumerate(stacked)]
    for r in reqs_alone:
        r.run()
    assert FrontEndFrames.run_stacked(reqs) == [None] * 4
    for i in range(4):
        for layer in (1, 2):  # conv outputs: same rows, same values
            a, b = alone[i]._bufs[layer], stacked[i]._bufs[layer]
            assert a.length == b.length > 0
            torch.testing.assert_close(b.view(), a.view(), atol=1e-5, rtol=1e-5)
    want = [s.accept_frames(cmvn(feats(10 + i, new[i])), finished=fin[i]) for i, s in enumerate(model_path)]
    got_alone = [run_alone(s.accept_frames_steps(np.zeros((0, 80), np.float32), fin[i])) for i, s in enumerate(alone)]
    got = [run_alone(s.accept_frames_steps(np.zeros((0, 80), np.float32), fin[i])) for i, s in enumerate(stacked)]
    for w, a, b in zip(want, got_alone, got):
        assert w.size(1) > 0 or w.size(1) == a.size(1) == b.size(1)
        assert torch.equal(a, w)  # alone: the model's own conv_range path, bit for bit
        torch.testing.assert_close(b, w, atol=1e-5, rtol=1e-5)
    assert sum(w.size(1) for w in want) > 0
    # the four streams' conv outputs differ: mixed-up rows would show
    assert not torch.allclose(stacked[0]._bufs[2].view()[:4], stacked[1]._bufs[2].view()[:4], atol=1e-3)


def _decoder_case(m, seed: int, n_tok: int, n_states: int, rows: int):
    """A stepped decoder state with ``n_tok`` columns (column 1 invalid for row 0) and a request."""
    dec = m.decoder
    g = torch.Generator().manual_seed(seed)
    enc = torch.randn(1, n_states, m.cfg.d_model, generator=g)
    st = dec.init_state()
    for _ in range(n_tok):
        dec.step(torch.randint(3, 40, (rows, 1), generator=g), st, enc[:, : max(1, n_states - 2)])
    valid = torch.ones(rows, 1, n_tok + 1, dtype=torch.bool)
    if n_tok > 1:
        valid[0, 0, 1] = False
    vis = torch.arange(n_states)[None, None, :] < torch.tensor([n_states - 1] + [n_states] * (rows - 1))[:, None, None]
    toks = torch.randint(3, 40, (rows, 1), generator=g)
    return st, dict(tokens=toks, enc_states=enc, cross_attn_mask=vis, self_attn_mask=valid,
                    positions=torch.full((rows, 1), n_tok, dtype=torch.long), attn_layers=(1,))


def test_stacked_decoder_steps_equal_alone(tiny_model):
    """Streams with 0, 3 and 6 cached tokens, 5, 9 and 12 encoder states, 3, 2 and 3 rows."""
    m = tiny_model()
    cases = [(0, 0, 5, 3), (1, 3, 9, 2), (2, 6, 12, 3)]
    alone, stacked = [], []
    for seed, n_tok, n_states, rows in cases:
        st_a, kw = _decoder_case(m, seed, n_tok, n_states, rows)
        st_b, _ = _decoder_case(m, seed, n_tok, n_states, rows)
        alone.append(DecoderStep(m.decoder, st_a, **kw))
        stacked.append(DecoderStep(m.decoder, st_b, **kw))
    want = [r.run() for r in alone]
    got = DecoderStep.run_stacked(stacked)
    for w, g, a, b in zip(want, got, alone, stacked):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
        assert b.state.num_tokens == a.state.num_tokens and b.state.cross_len == a.state.cross_len
        torch.testing.assert_close(b.state.cross_attn[1], a.state.cross_attn[1], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(b.state.self_cache[0].get()[0], a.state.self_cache[0].get()[0])
    # a wrong row routing would be caught: the streams' logits differ
    assert not torch.allclose(want[0][0], want[2][0], atol=1e-3)


@pytest.fixture(scope="module")
def factory(tiny_system):
    return driver_factory(tiny_system)


@pytest.fixture(scope="module")
def audios():
    """Three different streams: the speech, its second half louder, a shorter one with longer pauses."""
    x = speech()
    y = speech(pause_s=0.9)
    return [x, np.clip(1.6 * x[len(x) // 3:], -1, 1), y[: int(len(y) * 0.7)]]


def test_streams_stepped_together_write_what_each_writes_alone(factory, audios):
    make_driver, langs = factory
    want = [offline_words(make_driver, langs, a) for a in audios]
    assert all(want) and want[0] != want[1] != want[2]
    starts = [0, 3, 7]  # ticks at which each stream starts
    sizes = [1600, 2400, 5120, 800, 3200]  # samples per stream and tick, varying
    drivers = [make_driver(langs) for _ in audios]
    pos = [0] * len(audios)
    got: list[list] = [[] for _ in audios]
    stats = StackStats()
    tick = 0
    while any(p <= len(a) for p, a in zip(pos, audios)):
        gens, idx = [], []
        for i, (d, a) in enumerate(zip(drivers, audios)):
            if tick < starts[i] or pos[i] > len(a):
                continue
            if pos[i] == len(a):
                gens.append(d.finish_steps())
                pos[i] += 1
            else:
                n = sizes[(tick + i) % len(sizes)]
                gens.append(d.push_steps(a[pos[i]:pos[i] + n]))
                pos[i] = min(pos[i] + n, len(a))
            idx.append(i)
        for i, (evs, err) in zip(idx, run_stacked(gens, stats)):
            assert err is None
            got[i] += [(e.lang, e.text, e.segment, e.time_ms) for e in evs if hasattr(e, "text")]
        tick += 1
    for i in range(len(audios)):
        assert got[i] == want[i], f"stream {i}"
    for kind in ("VadWindows", "FrontEndFrames", "EncoderBlock", "DecoderStep"):
        calls, requests = stats.by_kind[kind]
        assert requests > calls, f"{kind} requests were never stacked"
    for d in drivers:
        make_driver.release(d)


def test_server_tick_and_off_equal_the_offline_cli(factory, audios, tiny_system, tmp_path):
    """Three concurrent clients of different audio against the server, stacked (tick) and alone (off);
    the first stream also against ``eval/longform_eval.py`` on the same wav."""
    import soundfile as sf
    from test_serve_server import as_tuples, run_server

    from mmst.serve.client import stream_audio

    make_driver, langs = factory
    want = [[(lang, t, s, round(ms, 1)) for lang, t, s, ms in offline_words(make_driver, langs, a)] for a in audios]
    wav = tmp_path / "a.wav"
    sf.write(wav, audios[0], 16000, subtype="FLOAT")
    by_lang = sorted(want[0], key=lambda w: langs.index(w[0]))  # the CLI writes one file per language
    assert longform_cli_words(tiny_system, wav, langs, tmp_path / "cli") == by_lang

    async def fn(url, server):
        # The compute thread is held until all three streams have sent all their audio and ``end``, so
        # what is ready together is known: whatever batch the tick loop chose before the release, the
        # streams are computed in at most two ticks, one of which holds at least two streams with all
        # their audio. Stacking is then a property of the scheduler, not of the machine's speed. A step
        # takes at most 320 ms of a stream's audio, so "all their audio" is computed over as many ticks.
        gate = threading.Event()
        held = asyncio.ensure_future(server.scheduler.run(gate.wait, 120.0))
        clients = [asyncio.ensure_future(stream_audio(url, audios[i], frame_ms=ms, realtime=False,
                                                      sample_format="float32"))
                   for i, ms in enumerate((100, 60, 140))]
        for _ in range(12000):
            sessions = list(server.scheduler.sessions)
            if len(sessions) == 3 and all(s.ended for s in sessions):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the three streams did not send all their audio within 120 s")
        gate.set()
        await held
        return await asyncio.gather(*clients), server.stats()

    for mode in ("tick", "off"):
        res, stats = run_server(factory, fn, batching=mode, compute_workers=2, worker_min_streams=1)
        for i, r in enumerate(res):
            assert r.close_code == 1000 and as_tuples(r) == want[i], f"{mode}: stream {i}"
        if mode == "tick":
            from mmst.serve.batching import DEFAULT_MAX_STEP_SAMPLES

            assert stats["ticks"] <= 2 + -(-max(map(len, audios)) // DEFAULT_MAX_STEP_SAMPLES) + 1, stats
            for kind in ("VadWindows", "FrontEndFrames", "EncoderBlock"):  # every stream has all three
                assert stats["stacked"][kind]["requests"] > stats["stacked"][kind]["calls"], (kind, stats)
        else:
            assert stats["stacked"] == {}


def test_run_stacked_reports_one_failing_stream():
    """A generator that raises is reported; the others get their results; each is reported done as soon
    as it finished."""
    class Twice:
        stage = 0

        def __init__(self, x):
            self.x = x

        def run(self):
            return 2 * self.x

        def stack_key(self):
            return "twice"

        @classmethod
        def run_stacked(cls, reqs):
            return [2 * r.x for r in reqs]

    def ok(x):
        y = yield Twice(x)
        return (yield Twice(y))

    def bad():
        yield Twice(1)
        raise RuntimeError("broken stream")

    stats = StackStats()
    done = []
    out = run_stacked([ok(1), bad(), ok(5)], stats, on_done=lambda i, v, e: done.append((i, v, e)))
    assert out[0] == (4, None) and out[2] == (20, None)
    assert [d[0] for d in done] == [1, 0, 2] and done[1][1:] == (4, None)  # each as soon as it finished
    assert out[1][0] is None and "broken stream" in str(out[1][1])
    assert stats.by_kind == {"Twice": [2, 5]} and run_alone(ok(3)) == 12


def test_a_failing_decoder_step_fails_its_stream_only(tiny_model):
    """A step asking for a decoder layer that does not exist gets its error; the others their logits."""
    m = tiny_model()
    steps, want = [], []
    for seed in range(3):
        st_a, kw = _decoder_case(m, seed, 2, 6, 2)
        st_b, _ = _decoder_case(m, seed, 2, 6, 2)
        if seed == 1:
            kw["attn_layers"] = (99,)
        else:
            want.append(DecoderStep(m.decoder, st_a, **kw).run())
        steps.append(DecoderStep(m.decoder, st_b, **kw))
    got = DecoderStep.run_stacked(steps)
    assert isinstance(got[1], ValueError) and "99" in str(got[1])
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[2], want[1], atol=1e-5, rtol=1e-5)
    assert steps[1].state.num_tokens == 2  # untouched


def test_a_failed_stacked_call_is_retried_request_by_request():
    """A stacked call raises (after changing every stream's state) when a bad request is in it: the states
    are restored and each request recomputed alone; only the bad one's stream fails. Without
    ``save_state`` the whole group fails, as before."""
    class Add:
        stage = 0

        def __init__(self, acc, x, bad=False):
            self.acc, self.x, self.bad = acc, x, bad

        def run(self):
            if self.bad:
                raise ValueError("bad request")
            self.acc.append(self.x)
            return sum(self.acc)

        def stack_key(self):
            return "add"

        def save_state(self):
            n = len(self.acc)
            return lambda: self.acc.__delitem__(slice(n, None))

        @classmethod
        def run_stacked(cls, reqs):
            for r in reqs:
                r.acc.append(r.x)  # mutates first, then fails
            if any(r.bad for r in reqs):
                raise RuntimeError("stacked call failed")
            return [sum(r.acc) for r in reqs]

    class AddNoRestore(Add):
        save_state = None

    def stream(cls, acc, xs, bad_at=None):
        total = None
        for i, x in enumerate(xs):
            total = yield cls(acc, x, bad=i == bad_at)
        return total

    for cls in (Add, AddNoRestore):
        accs = [[], [], []]
        stats = StackStats()
        out = run_stacked([stream(cls, accs[0], [1, 2]), stream(cls, accs[1], [10, 20], bad_at=0),
                           stream(cls, accs[2], [100, 200])], stats)
        if cls is Add:
            assert out[0] == (3, None) and out[2] == (300, None) and accs == [[1, 2], [], [100, 200]]
            assert isinstance(out[1][1], ValueError) and stats.retried == 1
        else:
            assert all(isinstance(e, RuntimeError) for _, e in out) and stats.retried == 0


class _Echo:
    """A scripted compute request: its result is its value; every stacked call records its thread."""

    stage = 0
    threads: list[int] = []

    def __init__(self, value):
        self.value = value

    def stack_key(self):
        return "echo"

    def run(self):
        return self.value

    @classmethod
    def run_stacked(cls, reqs):
        cls.threads.append(threading.get_ident())
        return [r.value for r in reqs]


class _ScriptedSession:
    """What the scheduler needs of a session: queued values, one ``_Echo`` request per step."""

    def __init__(self, name: str):
        self.name, self.pending, self.compute_s = name, [], 0.0

    def has_work(self) -> bool:
        return bool(self.pending)

    def step_steps(self, max_samples=None):
        value, self.pending = self.pending, []
        got = yield _Echo((self.name, value))
        return [got]


def _scheduler_run(script, **kw):
    """Run ``script(scheduler, sessions, delivered)`` against a started TickScheduler of 4 scripted sessions."""
    from mmst.serve.batching import TickScheduler

    async def main():
        delivered = []
        sched = TickScheduler(lambda s, events, err: delivered.append((s.name, events, err)), "tick", **kw)
        sched.start()
        sessions = [_ScriptedSession(n) for n in "abcd"]
        try:
            return await script(sched, sessions, delivered)
        finally:
            await sched.stop()

    return asyncio.run(main())


async def _until(cond, what: str):
    for _ in range(3000):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within 30 s: {what}")


def test_a_tick_waits_for_the_frames_of_its_interval():
    """tick_ms = 10 min: after a tick, a frame of stream a alone does not start the next tick; it starts
    once the other stream's frame is in (every stream has work) and steps both in one stacked call."""

    async def script(sched, sessions, delivered):
        a, b = sessions[:2]
        for s in (a, b):
            sched.add(s)
        a.pending, b.pending = [1], [1]
        await sched.notify(a)
        await _until(lambda: len(delivered) == 2, "the first tick")
        a.pending = [2]
        await sched.notify(a)
        await asyncio.sleep(0.3)  # time for a loop that does not wait to compute a alone
        assert sched.ticks == 1 and len(delivered) == 2
        b.pending = [2]
        await sched.notify(b)
        await _until(lambda: len(delivered) == 4, "the second tick")
        return sched, delivered

    sched, delivered = _scheduler_run(script, workers=1, tick_ms=600_000.0)
    assert sched.ticks == 2 and sched.stack.by_kind == {"_Echo": [2, 4]}  # two calls, both streams in each
    assert sorted(ev for _, ev, _ in delivered[2:]) == [[("a", [2])], [("b", [2])]]


def test_compute_workers_step_disjoint_groups_in_parallel_threads():
    """Four streams, two workers: one tick, two stacked calls of two streams each, on two threads; every
    stream gets its own result."""

    async def script(sched, sessions, delivered):
        for i, s in enumerate(sessions):
            sched.add(s)
            s.pending = [i]
        _Echo.threads.clear()
        await sched.notify(sessions[0])
        await _until(lambda: len(delivered) == 4, "the tick")
        return sched, delivered

    sched, delivered = _scheduler_run(script, workers=2, tick_ms=0.0, min_group=2)
    assert sched.ticks == 1 and sched.stack.by_kind == {"_Echo": [2, 4]}
    assert len(set(_Echo.threads)) == 2
    assert sorted((n, ev) for n, ev, _ in delivered) == [(n, [(n, [i])]) for i, n in enumerate("abcd")]


def test_a_tick_starts_once_tick_streams_streams_have_audio():
    """tick_ms = 10 min, tick_streams = 2, three streams: after a tick, a's frame waits; once b's is in,
    the tick starts without waiting for c's, and steps a and b in one call."""

    async def script(sched, sessions, delivered):
        a, b, c = sessions[:3]
        for s in (a, b, c):
            sched.add(s)
            s.pending = [1]
        await sched.notify(a)
        await _until(lambda: len(delivered) == 3, "the first tick")
        a.pending = [2]
        await sched.notify(a)
        await asyncio.sleep(0.3)  # time for a loop that does not wait to compute a alone
        assert sched.ticks == 1 and len(delivered) == 3
        b.pending = [2]
        await sched.notify(b)
        await _until(lambda: len(delivered) == 5, "the second tick")
        return sched, delivered

    sched, delivered = _scheduler_run(script, workers=1, tick_ms=600_000.0, tick_streams=2)
    assert sched.ticks == 2 and sched.stack.by_kind == {"_Echo": [2, 5]}
    assert sorted(ev for _, ev, _ in delivered[3:]) == [[("a", [2])], [("b", [2])]]


@pytest.mark.parametrize("cores,want", [(1, 1), (2, 1), (3, 1), (4, 2), (6, 3), (8, 4), (64, 4)])
def test_default_compute_workers_is_one_per_two_cores(monkeypatch, cores, want):
    """One compute thread per two cores the process may use, at least 1, at most MAX_DEFAULT_WORKERS (4): on a
    2-core machine one thread (docs/serving.md: a second one costs latency near saturation there)."""
    from mmst.serve import batching

    monkeypatch.setattr(batching.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert batching.default_workers() == want
