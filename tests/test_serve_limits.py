"""The limits of mmst-serve against clients that try to get around them: pace credit saved while silent,
empty or one-sample frames that keep a stream "active", sockets that never send ``start``, non-finite
audio, per-address counting (release on close, IPv6 /64), its own page on ``--host 0.0.0.0``, a stuck
compute thread, a tick that fails for some of its streams, and a hypothesis test of random client
actions against a fake clock.

Scripted drivers and a fake clock (``serve_fixtures``): every number asserted is computed by hand; no
test sleeps on the real clock beyond the server's deadline check (0.1 s).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_fixtures import END, START, FakeClock, FakeDriver, closed_code, open_started, serve_with, until

from mmst.serve.client import encode_audio, stream_audio
from mmst.serve.limits import PaceBucket, RateLimitedLog, address_key, max_queue_frames
from mmst.serve.protocol import (
    CLOSE_BAD_MESSAGE,
    CLOSE_IDLE,
    CLOSE_INTERNAL_ERROR,
    CLOSE_SERVER_FULL,
    CLOSE_START_TIMEOUT,
    CLOSE_TOO_FAST,
    ProtocolError,
    StartRequest,
)
from mmst.serve.server import ServerConfig, TranslationServer
from mmst.serve.session import MARK_KEEP_S, MARK_MIN_SAMPLES, StreamSession
from mmst.simultaneous.longform import LongFormWord, SegmentEnd

websockets_client = pytest.importorskip("websockets.asyncio.client")
from websockets.exceptions import InvalidStatus  # noqa: E402

SECOND = encode_audio(np.zeros(16000, np.float32), "int16")


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# ---------------------------------------------------------------------------------------------- pace
def test_pace_bucket_by_hand():
    """rate 2, burst 10: full at start; 3 s later 6 s are back; a frame past the burst takes nothing;
    after 1000 s of silence the bucket holds 10 s, not 2000."""
    b = PaceBucket(2.0, 10.0, now=0.0)
    assert b.charge(10.0, 0.0) == pytest.approx(10.0)
    assert b.ahead_s(3.0) == pytest.approx(4.0)
    assert b.charge(6.0, 3.0) == pytest.approx(10.0)
    assert b.charge(0.5, 3.0) == pytest.approx(10.5) and b.ahead_s(3.0) == pytest.approx(10.0)
    assert b.ahead_s(1000.0) == 0.0
    assert b.charge(10.0, 1000.0) == pytest.approx(10.0) and b.charge(0.1, 1000.0) == pytest.approx(10.1)


def test_credit_saved_while_silent_is_capped():
    """A client silent for 100 s (fake clock) then bursting: 10 s (--max-ahead-s) pass, the 11th second
    closes the stream with 4429 (without the cap, 110 s would pass)."""
    clock = FakeClock()

    async def fn(url, port, server):
        async with websockets_client.connect(url) as ws:
            await ws.send(START)
            await ws.recv()
            clock.advance(100.0)
            try:
                for _ in range(30):
                    await ws.send(SECOND)
                await ws.send(END)
            except Exception:  # noqa: BLE001 - closed while sending
                pass
            code, reason = await closed_code(ws)
        received = max((s.received_s for s in server.scheduler.sessions), default=None)
        return code, reason, received

    code, reason, _ = serve_with(lambda langs: FakeDriver(), fn, clock=clock, idle_timeout_s=1000.0)
    assert code == CLOSE_TOO_FAST and "11.00 s ahead" in reason


def test_every_frame_takes_at_least_10_ms_of_pace():
    """--max-ahead-s 10, the clock standing: one-sample frames each take 10 ms, so 1000 pass and the
    1001st closes the stream (10.01 s ahead); a flood of tiny messages is bounded like audio."""
    clock = FakeClock()
    one = encode_audio(np.zeros(1, np.float32), "int16")

    async def fn(url, port, server):
        async with websockets_client.connect(url) as ws:
            await ws.send(START)
            await ws.recv()
            try:
                for _ in range(1001):
                    await ws.send(one)
                await ws.send(END)
            except Exception:  # noqa: BLE001 - closed while sending
                pass
            return await closed_code(ws)

    code, reason = serve_with(lambda langs: FakeDriver(), fn, clock=clock)
    assert code == CLOSE_TOO_FAST and "10.01 s ahead" in reason


def test_read_buffer_follows_the_message_size():
    assert max_queue_frames(1 << 20, 4 << 20) == 4
    assert max_queue_frames(64 << 10, 4 << 20) == 64
    assert max_queue_frames(8 << 20, 4 << 20) == 1


def test_marks_and_queue_do_not_grow_with_the_frame_count():
    """20,000 one-sample frames (1.25 s of audio): the receive-time marks and the queue hold one entry
    per 10 ms (160 frames), not one per frame; computing the audio and writing its words (the last, w12,
    at 1200 ms) leaves the marks from 1200 ms on: (20000 - 19200) / 160 + 1 = 6."""
    s = StreamSession(_ChunkDriver(), StartRequest(("de",), 16000, "float32"), clock=lambda: 0.0)
    one = np.zeros(1, np.float32)
    for i in range(20_000):
        s.add_audio(one, recv_time=i * 1e-3)
    assert s.marks() == s.queued_arrays() == 20_000 // MARK_MIN_SAMPLES
    # a merged mark keeps its first frame's receive time: 100 ms of audio were complete at frame 1600,
    # which is within the 160-frame mark that starts at frame 1440
    assert s.recv_time_for(100.0) == pytest.approx(1440 * 1e-3)
    words = s.step()
    assert [w["text"] for w in words] == [f"w{k}" for k in range(1, 13)]
    assert s.marks() == 6 and s.queued_arrays() == 0


# ---------------------------------------------------------------------------------------------- idle and start
def test_empty_and_one_sample_frames_do_not_keep_a_stream_open():
    """--idle-timeout-s 3 by the fake clock: after 100 ms of audio, an empty frame and a one-sample frame
    every second; the stream is closed with 4410 once 3 s have passed without 20 ms of audio, although
    frames keep coming (on the real clock too)."""
    clock = FakeClock()

    async def fn(url, port, server):
        async with websockets_client.connect(url) as ws:
            await ws.send(START)
            await ws.recv()
            await ws.send(encode_audio(np.zeros(1600, np.float32), "int16"))
            await until(lambda: any(c.session and c.session.received_s >= 0.1 for c in server.clients), "the audio")
            try:
                for _ in range(4):
                    clock.advance(1.0)
                    await ws.send(b"")
                    await ws.send(encode_audio(np.zeros(1, np.float32), "int16"))
                for _ in range(20):  # frames keep coming for up to 4 s of real time
                    await ws.send(b"")
                    await asyncio.sleep(0.2)
            except Exception:  # noqa: BLE001 - closed while sending
                pass
            return await closed_code(ws, timeout_s=5.0)

    code, reason = serve_with(lambda langs: FakeDriver(), fn, clock=clock, idle_timeout_s=3.0)
    assert code == CLOSE_IDLE and "--idle-timeout-s" in reason


def test_no_start_message_within_the_start_timeout():
    """--start-timeout-s 5 by the fake clock: a socket that sends nothing is closed with 4411 at 5 s
    (not before), and its slot is free."""
    clock = FakeClock()

    async def fn(url, port, server):
        async with websockets_client.connect(url) as ws:
            clock.advance(4.9)
            await asyncio.sleep(0.3)  # three deadline checks
            early = len(server.clients)
            clock.advance(0.2)
            code, reason = await closed_code(ws, timeout_s=5.0)
        await until(lambda: not server.clients, "the slot to be freed")
        return early, code, reason

    early, code, reason = serve_with(lambda langs: FakeDriver(), fn, clock=clock, start_timeout_s=5.0)
    assert early == 1 and code == CLOSE_START_TIMEOUT and "--start-timeout-s" in reason


# ---------------------------------------------------------------------------------------------- audio values
def test_non_finite_or_out_of_range_audio_is_a_client_error(caplog):
    """NaN, Inf and 5.0 in float32 frames: 4400 naming the sample, one INFO line each, no ERROR line and
    no traceback (before, NaN reached the model: 1011 and an ERROR line per frame)."""
    caplog.set_level(logging.INFO, logger="mmst.serve")
    frames = [np.array([0.1, np.nan], np.float32), np.array([np.inf], np.float32), np.array([0.0, 0.5, 5.0], np.float32)]

    async def fn(url, port, server):
        out = []
        for x in frames:
            async with websockets_client.connect(url) as ws:
                await ws.send(json.dumps({"type": "start", "sample_format": "float32"}))
                await ws.recv()
                await ws.send(encode_audio(np.zeros(1600, np.float32), "float32"))
                await ws.send(x.astype("<f4").tobytes())
                out.append(await closed_code(ws))
        return out

    got = serve_with(lambda langs: FakeDriver(), fn)
    assert [c for c, _ in got] == [CLOSE_BAD_MESSAGE] * 3
    assert "sample 1 is not finite" in got[0][1] and "sample 0 is not finite" in got[1][1]
    assert "sample 2 is outside [-2, 2]" in got[2][1]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info is not None]
    assert len([r for r in caplog.records if "closed (4400)" in r.getMessage()]) == 3


def test_warnings_of_the_libraries_share_the_rate_limit():
    """A logger the server filters (the stacked calls' retries) lets ``burst`` warnings per window
    through, INFO lines are not counted, and the next line that passes says how many were dropped."""
    clock = FakeClock()
    lines = []
    log = logging.getLogger("mmst.test.filtered")
    handler = logging.Handler()
    handler.emit = lambda r: lines.append(r.getMessage())
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    rl = RateLimitedLog(logging.getLogger("mmst.test.unused"), burst=2, window_s=10.0, clock=clock)
    log.addFilter(rl)
    try:
        for i in range(4):
            log.warning("retry %d", i)
        log.info("info")
        clock.advance(10.0)
        log.warning("retry %d", 4)
    finally:
        log.removeFilter(rl)
        log.removeHandler(handler)
    assert lines == ["retry 0", "retry 1", "info", "retry 4 (2 similar line(s) not logged)"]


# ---------------------------------------------------------------------------------------------- addresses
def test_per_address_count_is_released_on_close():
    """--max-clients-per-ip 1 behind a trusted proxy: a second stream of 203.0.113.7 is refused while the
    first is open; once it closed (normally, or for a fault), the address may open one again."""

    async def fn(url, port, server):
        out = []
        a, r = await open_started(url, "203.0.113.7")
        b, rb = await open_started(url, "203.0.113.7")
        out += [r, rb[0]]
        await a.close()
        await until(lambda: len(server.clients) == 0, "the first stream to be freed")
        c, rc = await open_started(url, "203.0.113.7")
        out.append(rc)
        await c.send(START)  # a fault: start twice
        out.append((await closed_code(c))[0])
        d, rd = await open_started(url, "203.0.113.7")
        out.append(rd)
        await d.close()
        await until(lambda: len(server.clients) == 0, "every stream to be freed")
        return out, dict(server._per_ip)

    out, per_ip = serve_with(lambda langs: FakeDriver(), fn, max_clients_per_ip=1, trusted_proxy="127.0.0.1")
    assert out == ["ready", CLOSE_SERVER_FULL, "ready", CLOSE_BAD_MESSAGE, "ready"] and per_ip == {}


def test_address_keys():
    assert address_key("203.0.113.7") == "203.0.113.7"
    assert address_key("::ffff:203.0.113.7") == "203.0.113.7"
    assert address_key("2001:db8::1") == address_key("2001:db8::ffff:1:2") == "2001:db8::/64"
    assert address_key("2001:db8:0:1::1") == "2001:db8:0:1::/64"
    assert address_key("2001:db8::1", 128) == "2001:db8::1/128"
    assert address_key("proxy.example") == "proxy.example"


def test_ipv6_clients_are_counted_per_64():
    """--max-clients-per-ip 1: 2001:db8::2 is in the /64 of an open 2001:db8::1 stream (refused);
    2001:db8:0:1::1 is another /64 (served); with --ipv6-prefix 128 each address counts alone."""

    async def fn(url, port, server):
        conns = [await open_started(url, f) for f in ("2001:db8::1", "2001:db8::2", "2001:db8:0:1::1")]
        for ws, _ in conns:
            await ws.close()
        return [r if isinstance(r, str) else r[0] for _, r in conns]

    kw = {"max_clients_per_ip": 1, "trusted_proxy": "127.0.0.1"}
    assert serve_with(lambda langs: FakeDriver(), fn, **kw) == ["ready", CLOSE_SERVER_FULL, "ready"]
    assert serve_with(lambda langs: FakeDriver(), fn, ipv6_prefix=128, **kw) == ["ready"] * 3


def test_own_page_on_every_interface_by_any_address():
    """--host 0.0.0.0: the page opened as http://127.0.0.2:PORT/ (an address not among the server's
    names) may open its WebSocket; another origin sent to that Host may not (403)."""

    async def fn(url, port, server):
        url2 = f"ws://127.0.0.2:{port}/ws"
        out = {}
        for name, origin in (("own", f"http://127.0.0.2:{port}"), ("evil", "http://evil.example"),
                             ("other port", f"http://127.0.0.2:{port + 1}")):
            try:
                async with websockets_client.connect(url2, additional_headers={"Origin": origin}) as ws:
                    await ws.send(START)
                    out[name] = json.loads(await ws.recv())["type"]
            except InvalidStatus as e:
                out[name] = e.response.status_code
        return out

    out = serve_with(lambda langs: FakeDriver(), fn, host="0.0.0.0")
    assert out == {"own": "ready", "evil": 403, "other port": 403}


def test_token_in_the_header_the_subprotocol_or_the_url():
    """The token is read from ``Authorization: Bearer``, the subprotocol ``mmst.bearer.<base64url>`` (the
    page's way; the server then speaks subprotocol ``mmst``) and, for old clients, ``?token=``."""
    import base64

    tok = "s3cr&t/é"
    b64 = base64.urlsafe_b64encode(tok.encode()).decode().rstrip("=")

    async def fn(url, port, server):
        out = {}
        for name, kw, u in (("header", {"additional_headers": {"Authorization": f"Bearer {tok}"}}, url),
                            ("subprotocol", {"subprotocols": ["mmst", f"mmst.bearer.{b64}"]}, url),
                            ("wrong subprotocol", {"subprotocols": ["mmst", "mmst.bearer.bm9wZQ"]}, url),
                            ("url", {}, url + "?token=s3cr%26t%2F%C3%A9")):
            async with websockets_client.connect(u, **kw) as ws:
                try:
                    await ws.send(START)
                    out[name] = (json.loads(await ws.recv())["type"], ws.subprotocol)
                except Exception:  # noqa: BLE001 - refused
                    out[name] = (ws.close_code, ws.subprotocol)
        return out

    out = serve_with(lambda langs: FakeDriver(), fn, token=tok)
    assert out == {"header": ("ready", None), "subprotocol": ("ready", "mmst"),
                   "wrong subprotocol": (4401, "mmst"), "url": ("ready", None)}


# ---------------------------------------------------------------------------------------------- compute
def test_healthz_reports_a_stuck_compute_thread():
    """--stall-timeout-s 5 by the fake clock: with the compute thread held and a stream's audio waiting,
    /healthz says 200 at 4 s and 503 "stalled" at 6 s; once the thread is released, 200 again."""
    clock = FakeClock()

    async def fn(url, port, server):
        loop = asyncio.get_running_loop()
        health = f"http://127.0.0.1:{port}/healthz"
        gate = threading.Event()
        held = asyncio.ensure_future(server.scheduler.run(gate.wait, 60.0))
        out = []
        async with websockets_client.connect(url) as ws:
            await ws.send(START)
            await ws.recv()
            await ws.send(encode_audio(np.zeros(1600, np.float32), "int16"))
            await until(lambda: server.scheduler.health()["tick_running_s"] is not None, "a tick to wait")
            clock.advance(4.0)
            out.append(await loop.run_in_executor(None, _get, health))
            clock.advance(2.0)
            out.append(await loop.run_in_executor(None, _get, health))
            gate.set()
            await held
            await until(lambda: server.scheduler.health()["tick_running_s"] is None, "the tick to finish")
            out.append(await loop.run_in_executor(None, _get, health))
            await ws.send(END)
            await closed_code(ws)
        return out

    out = serve_with(lambda langs: FakeDriver(), fn, clock=clock, stall_timeout_s=5.0, idle_timeout_s=1000.0)
    assert [c for c, _ in out] == [200, 503, 200]
    assert out[1][1]["loop"] == "stalled" and out[1][1]["tick_running_s"] == pytest.approx(6.0)


def test_a_failed_tick_closes_only_the_streams_whose_steps_failed(monkeypatch):
    """One tick steps two streams; the loop fails after the first stream's step finished (an error
    outside any step). Only the second is closed (1011); the first gets its exact words and summary."""
    import mmst.serve.batching as batching

    real = batching.run_stacked
    calls = []

    def failing_after_the_first(steps, stats=None, costs=None, on_done=None):
        calls.append(len(steps))
        if len(calls) == 1 and len(steps) == 2:
            real(steps[:1], stats, costs, on_done)
            raise TypeError("unexpected")
        return real(steps, stats, costs, on_done)

    monkeypatch.setattr(batching, "run_stacked", failing_after_the_first)

    async def fn(url, port, server):
        gate = threading.Event()
        held = asyncio.ensure_future(server.scheduler.run(gate.wait, 60.0))
        conns = []
        for _ in range(2):  # both started before any audio: the first tick waits for both (--tick-ms)
            ws = await websockets_client.connect(url)
            await ws.send(START)
            await ws.recv()
            conns.append(ws)
        for ws in conns:
            await ws.send(encode_audio(np.zeros(3200, np.float32), "int16"))
        await until(lambda: sum(s.received_s for s in server.scheduler.sessions) >= 0.4 - 1e-9, "the audio")
        gate.set()
        await held
        out = []
        for ws in conns:
            words = []
            try:
                async for m in ws:
                    ev = json.loads(m)
                    if ev["type"] == "word":
                        words.append(ev["text"])
                        await ws.send(END)
            except Exception:  # noqa: BLE001 - closed
                pass
            out.append((ws.close_code, words))
        return out, server.scheduler.health()

    out, health = serve_with(lambda langs: FakeDriver(), fn, idle_timeout_s=1000.0)
    assert calls[0] == 2 and health["errors"] == 1
    assert sorted(out) == [(1000, ["w3200"]), (CLOSE_INTERNAL_ERROR, [])]


def test_client_measured_latency_contains_the_server_added_latency():
    """A file client (3 s in 100 ms frames, sent as fast as its pace allows, so many frames are out
    before the first word comes back): every word's client-measured latency runs from the due time of
    the frame the server's ``added_ms`` starts from (the frame is sent at or after it, and received
    after that) to receiving the word (after the server sent it), so it is at least ``added_ms``; timed
    from the last frame sent instead, the first words would come out below it."""

    async def fn(url, port, server):
        return await stream_audio(url, np.zeros(48000, np.float32), frame_ms=100.0, realtime=False)

    res = serve_with(lambda langs: FakeDriver(), fn, tick_ms=0.0)
    assert res.close_code == 1000 and len(res.lags_ms) == len(res.words) >= 1
    for w, lag in zip(res.words, res.lags_ms):
        assert lag >= w["added_ms"] - 0.1, (w, lag)


def test_load_summary_reports_the_client_latency():
    """Two clients' words: client latencies 30, 50 and one unknown (NaN, left out): p50 40, p95 30 +
    0.95 x 20 = 49 (numpy's linear interpolation); added latency and the rest as before."""
    from mmst.serve.client import StreamResult
    from mmst.serve.loadtest import summarize_clients

    a = StreamResult(words=[{"added_ms": 10.0}, {"added_ms": 20.0}], lags_ms=[30.0, 50.0], close_code=1000,
                     summary={"rtf": 0.1, "audio_ms": 1000.0})
    b = StreamResult(words=[{"added_ms": 5.0}], lags_ms=[float("nan")], close_code=1000,
                     summary={"rtf": 0.2, "audio_ms": 2000.0})
    s = summarize_clients([a, b], 2.0)
    assert s["client_latency_ms_p50"] == 40.0 and s["client_latency_ms_p95"] == pytest.approx(49.0)
    assert s["added_latency_ms_p50"] == 10.0 and s["words_per_s"] == 1.5 and s["rtf_max"] == 0.2 and s["audio_s"] == 3.0


# ---------------------------------------------------------------------------------------------- random clients
class _ChunkDriver:
    """Writes ``w<k>`` when the audio pushed reaches k x 100 ms (whatever the pushes' sizes), at 100k ms."""

    def __init__(self):
        self.n = 0
        self.k = 0

    def push(self, x):
        self.n += x.size
        out = []
        while (self.k + 1) * 1600 <= self.n:
            self.k += 1
            out.append(LongFormWord("de", f"w{self.k}", 0, self.k * 100.0, 0.0))
        return out

    def finish(self):
        return [SegmentEnd(0, 0.0, self.n / 16.0)]


class _Inline:
    """Stands for the event loop: the scheduler's callbacks run at once."""

    @staticmethod
    def call_soon_threadsafe(fn, *args):
        fn(*args)


RATES = st.sampled_from([1.0, 2.5, 10.0])
FRAMES = st.tuples(st.just("frames"), st.sampled_from([0, 1, 7, 159, 160, 1600, 16000, 48000]), st.integers(1, 200))
PAUSE = st.tuples(st.just("pause"), st.floats(0.0, 120.0))
# frames and pauses are most of a client's actions; end, a second start and an abrupt close come rarely
ACTIONS = st.lists(st.tuples(st.integers(0, 1), st.one_of(
    FRAMES, FRAMES, FRAMES, PAUSE, PAUSE,
    st.tuples(st.just("end"), st.none()),
    st.tuples(st.just("start"), RATES),
    st.tuples(st.just("close"), st.none()),
)), min_size=1, max_size=40)


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(rates=st.tuples(RATES, RATES), actions=ACTIONS)
def test_random_client_actions_keep_the_invariants(rates, actions):
    """Two random clients (start at a random rate, then frames of random sizes and counts, pauses, end, a
    second start, abrupt close) next to a real-time client (100 ms frames, 20 s), through the server's own admission
    (``accept_audio``) and ticks, on a fake clock. After every action: no stream was accepted more than
    ``--max-ahead-s + rate x T`` seconds of audio in any T seconds; every stream's receive-time marks and
    queued arrays stay within two per 10 ms of the audio they cover; at the end every stream's words are
    exactly those of the audio it was accepted (the real-time client's: all of its audio; a closed
    stream's: a prefix)."""
    from mmst.serve.batching import TickScheduler

    burst = 5.0
    clock = FakeClock()
    server = TranslationServer(lambda langs: _ChunkDriver(), ServerConfig(langs=["de"], max_ahead_s=burst),
                               clock=clock)
    got: dict = {}

    def deliver(session, events, error):
        got.setdefault(session, []).extend(["ERROR"] if error is not None else
                                           [e["text"] for e in events if e["type"] == "word"])

    sched = TickScheduler(deliver, "tick", workers=1)
    good = StreamSession(_ChunkDriver(), StartRequest(("de",), 16000, "int16"), clock=clock, max_ahead_s=burst)
    sched.add(good)
    frame = encode_audio(np.zeros(1600, np.float32), "int16")
    streams: dict[int, StreamSession] = {}
    accepted: dict[int, dict[float, float]] = {0: {}, 1: {}}  # receive time -> audio seconds accepted then
    closed: set[int] = set()
    n_good = 0

    def tick():
        while True:
            batch = [s for s in sched.sessions if s.has_work()]
            if not batch:
                return
            sched._compute(batch, _Inline())

    def check():
        for i, s in streams.items():
            times = sorted(accepted[i])
            for a in range(len(times)):
                total = 0.0
                for b in range(a, len(times)):
                    total += accepted[i][times[b]]
                    assert total <= burst + s.request.rate * (times[b] - times[a]) + 1e-6
        for s in [good, *streams.values()]:
            held = s.n_samples - max(0, s._taken - int(MARK_KEEP_S * 16000))
            assert s.marks() <= 2 * held // MARK_MIN_SAMPLES + 3
            assert s.queued_arrays() <= 2 * s.pending_samples() // MARK_MIN_SAMPLES + 2

    for who, rate in enumerate(rates):
        streams[who] = StreamSession(_ChunkDriver(), StartRequest(("de",), 16000, "int16", rate), clock=clock,
                                     max_ahead_s=burst)
        sched.add(streams[who])
    for who, (kind, arg, *more) in actions:
        s = streams[who]
        if who in closed:
            continue
        if kind in ("start", "close"):  # a second start is a fault (4400): closed like an abrupt close
            closed.add(who)
            sched.remove(s)
        elif kind == "frames":
            data = encode_audio(np.zeros(arg, np.float32), "int16")
            for _ in range(more[0]):
                try:
                    server.accept_audio(s, data)
                except ProtocolError as e:
                    assert e.code in (CLOSE_TOO_FAST, CLOSE_BAD_MESSAGE)
                    closed.add(who)
                    sched.remove(s)
                    break
                accepted[who][clock()] = accepted[who].get(clock(), 0.0) + arg / 16000
        elif kind == "pause":  # the real-time client sends each frame once it is over
            left = arg
            while left > 0 and n_good < 200:
                dt = min(left, (n_good + 1) * 0.1 - clock())
                clock.advance(max(dt, 0.0))
                left -= max(dt, 0.0)
                if clock() >= (n_good + 1) * 0.1 - 1e-9:
                    server.accept_audio(good, frame)
                    n_good += 1
                    tick()
            clock.advance(max(left, 0.0))
        elif kind == "end":
            s.end()
        check()
        tick()
    good.end()
    for i, s in streams.items():
        if i not in closed:
            s.end()
    tick()
    assert got.get(good, []) == [f"w{k}" for k in range(1, n_good + 1)]
    for i, s in streams.items():
        words = got.get(s, [])
        n = round(sum(accepted[i].values()) * 16000)
        want = len(words) if i in closed else n // 1600
        assert words == [f"w{k}" for k in range(1, want + 1)]
