"""mmst-serve on an open network: pacing (a flooding client is closed and cannot delay the others), origin
check, token on the JSON endpoints, idle and per-address limits, isolated failures (a stacked call that
raises, a scheduling loop that meets an unexpected error), client errors logged without tracebacks,
recycled drivers, saved audio.

Most tests use a scripted driver (:class:`FakeDriver`: one word per push, its compute time charged to a
fake clock), so what they assert is computed by hand and does not depend on the machine's speed; the
isolation tests use the tiny untrained model of ``tiny_system``.
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
from serve_fixtures import (
    END,
    START,
    FakeClock,
    FakeDriver,
    closed_code,
    driver_factory,
    offline_words,
    open_started,
    serve_with,
    speech,
    until,
)

from mmst.serve.client import encode_audio, stream_audio
from mmst.serve.protocol import (
    CLOSE_BAD_MESSAGE,
    CLOSE_IDLE,
    CLOSE_INTERNAL_ERROR,
    CLOSE_SERVER_FULL,
    CLOSE_TOO_FAST,
    CLOSE_UNSUPPORTED,
)
from mmst.serve.server import RateLimitedLog

websockets_client = pytest.importorskip("websockets.asyncio.client")
from websockets.exceptions import InvalidStatus  # noqa: E402


# ---------------------------------------------------------------------------------------------- pacing
def test_a_client_far_ahead_of_real_time_is_closed():
    """The clock stands still: 10 s of audio may be ahead, the 11th second closes the stream with 4429."""
    clock = FakeClock()

    async def fn(url, port, server):
        async with websockets_client.connect(url) as ws:
            await ws.send(START)
            assert json.loads(await ws.recv())["max_ahead_s"] == 10.0
            sent = 0
            try:
                for _ in range(30):
                    await ws.send(encode_audio(np.zeros(16000, np.float32), "int16"))
                    sent += 1
            except Exception:  # noqa: BLE001 - closed while sending
                pass
            code, reason = await closed_code(ws)
        await until(lambda: not server.clients, "the stream to be freed")
        return code, reason, sent

    code, reason, _ = serve_with(lambda langs: FakeDriver(), fn, clock=clock)
    assert code == CLOSE_TOO_FAST and "--max-ahead-s 10" in reason and "11.00 s ahead" in reason


def test_declared_rate_paces_the_stream():
    """``rate`` 4, --max-ahead-s 10: the bucket is full (10 s) at start and stays full while silent, so
    after 2 s of silence 8 s at once are 8 s ahead (not 0: credit is capped); 1 s later 4 s are back;
    above --max-rate: 4415."""
    from mmst.serve.protocol import StartRequest, parse_start
    from mmst.serve.session import StreamSession

    clock = FakeClock()
    req = parse_start({"type": "start", "rate": 4}, ["de"], max_rate=10)
    s = StreamSession(FakeDriver(), req, clock=clock, max_ahead_s=10.0)
    clock.advance(2.0)
    for _ in range(8):
        assert s.pace.charge(1.0, clock()) <= 10.0
        s.add_audio(np.zeros(16000, np.float32))
    assert req.rate == 4.0 and s.ahead_s() == pytest.approx(8.0)
    clock.advance(1.0)
    assert s.ahead_s() == pytest.approx(4.0)
    s2 = StreamSession(FakeDriver(), StartRequest(("de",), 8000, "int16"), clock=clock)
    s2.pace.charge(3.0, clock())  # 3 s at 8 kHz, real time, at once
    assert s2.ahead_s() == pytest.approx(3.0)

    async def fn(url, port, server):
        async with websockets_client.connect(url) as ws:
            await ws.send(json.dumps({"type": "start", "rate": 50}))
            return await closed_code(ws)

    code, reason = serve_with(lambda langs: FakeDriver(), fn, max_rate=20)
    assert code == CLOSE_UNSUPPORTED and "--max-rate" in reason and "20" in reason


def test_a_flooding_client_does_not_delay_a_normal_stream():
    """A flooder sends 9 s of audio in one message (within --max-ahead-s); its first step is running when
    a normal client sends 2 s. Compute costs 0.2 s per audio second (fake clock). Alone, the normal
    stream's first word has 0.064 s added latency (its 320 ms step); next to the flooder it may wait for
    a few of the flooder's bounded steps (0.064 s each), never for its whole backlog (1.8 s)."""

    def first_word_latency(flood: bool) -> float:
        clock = FakeClock()
        gate = threading.Event()
        drivers: list[FakeDriver] = []

        def make_driver(langs):
            drivers.append(FakeDriver(clock, 0.2, gate if flood and not drivers else None))  # gate: the flooder
            return drivers[-1]

        async def fn(url, port, server):
            flooder = held = None
            if not flood:  # the compute thread is held until the normal stream's audio is in
                held = asyncio.ensure_future(server.scheduler.run(gate.wait, 60.0))
            else:
                flooder = await websockets_client.connect(url)
                await flooder.send(START)
                await flooder.recv()
                await flooder.send(encode_audio(np.full(9 * 16000, 0.1, np.float32), "int16"))
                await until(lambda: drivers[0].entered.is_set(), "the flooder's first push")
            normal = asyncio.ensure_future(stream_audio(url, np.full(2 * 16000, 0.1, np.float32), realtime=False))
            await until(lambda: sum(s.received_s for s in server.scheduler.sessions) >= (11.0 if flood else 2.0),
                         "the normal stream's audio")
            gate.set()
            if held is not None:
                await held
            res = await normal
            if flooder is not None:
                await flooder.close()
            return res

        res = serve_with(make_driver, fn, clock=clock)
        assert res.close_code == 1000 and res.words
        return res.words[0]["added_ms"] / 1000.0

    alone = first_word_latency(False)
    flooded = first_word_latency(True)
    assert alone == pytest.approx(0.064, abs=1e-6)
    assert flooded - alone < 0.5, f"first word {flooded:.3f} s with a flooder, {alone:.3f} s alone"


def test_batching_off_keeps_no_task_per_frame():
    """--batching off with the compute thread busy: 60 frames waiting are 60 queued arrays, not 60 asyncio
    tasks; once released, each is computed alone (one push per frame)."""
    drivers: list[FakeDriver] = []

    def make_driver(langs):
        drivers.append(FakeDriver())
        return drivers[-1]

    async def fn(url, port, server):
        gate = threading.Event()
        held = asyncio.ensure_future(server.scheduler.run(gate.wait, 60.0))
        await asyncio.sleep(0)
        tasks0 = len(asyncio.all_tasks())
        async with websockets_client.connect(url) as ws:
            await ws.send(START)
            await ws.recv()
            for _ in range(60):
                await ws.send(encode_audio(np.zeros(160, np.float32), "int16"))
            await until(lambda: any(s.received_s >= 0.6 - 1e-9 for s in server.scheduler.sessions), "the frames")
            tasks = len(asyncio.all_tasks()) - tasks0
            gate.set()
            await held
            await ws.send(END)
            await closed_code(ws)
        return tasks

    extra_tasks = serve_with(make_driver, fn, batching="off")
    assert extra_tasks <= 5, f"{extra_tasks} tasks for one connection"
    assert drivers[0].pushes == [160] * 60


# ---------------------------------------------------------------------------------------------- network
def _get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_origin_token_and_health(caplog):
    """A page of another origin cannot open a stream (403, one log line); the server's own page and
    --allow-origin can, and programs (no Origin) too. The token guards /stats.json and /config.json."""
    caplog.set_level(logging.INFO, logger="mmst.serve")

    async def fn(url, port, server):
        out = {}
        loop = asyncio.get_running_loop()
        try:
            async with websockets_client.connect(url + "?token=s3", additional_headers={"Origin": "http://evil.example"}):
                out["evil"] = "open"
        except InvalidStatus as e:
            out["evil"] = e.response.status_code
        for name, origin in (("own", f"http://127.0.0.1:{port}"), ("localhost", f"http://localhost:{port}"),
                             ("proxy", "https://translate.example.org"), ("none", None)):
            hdrs = {"Origin": origin} if origin else {}
            async with websockets_client.connect(url + "?token=s3", additional_headers=hdrs) as ws:
                await ws.send(START)
                out[name] = json.loads(await ws.recv())["type"]
        base = f"http://127.0.0.1:{port}"
        for path in ("/stats.json", "/config.json"):
            out[path] = await loop.run_in_executor(None, _get, base + path)
            out[path + "?token"] = await loop.run_in_executor(None, _get, base + path + "?token=s3")
        out["bearer"] = await loop.run_in_executor(None, _get, base + "/stats.json", {"Authorization": "Bearer s3"})
        out["healthz"] = await loop.run_in_executor(None, _get, base + "/healthz")
        return out

    out = serve_with(lambda langs: FakeDriver(), fn, token="s3", allow_origins=["https://translate.example.org/"])
    assert out["evil"] == 403
    assert out["own"] == out["localhost"] == out["proxy"] == out["none"] == "ready"
    refused = [r for r in caplog.records if "evil.example" in r.getMessage()]
    assert len(refused) == 1 and refused[0].exc_info is None
    for path in ("/stats.json", "/config.json"):
        assert out[path][0] == 401 and b"token" in out[path][1]
        assert out[path + "?token"][0] == 200
    assert out["bearer"][0] == 200 and json.loads(out["bearer"][1])["health"]["loop"] == "running"
    assert out["healthz"][0] == 200 and json.loads(out["healthz"][1])["loop"] == "running"


def test_an_idle_client_is_closed():
    async def fn(url, port, server):
        async with websockets_client.connect(url) as ws:
            await ws.send(START)
            await ws.recv()
            await ws.send(encode_audio(np.zeros(1600, np.float32), "int16"))
            return await closed_code(ws)  # and then nothing

    code, reason = serve_with(lambda langs: FakeDriver(), fn, idle_timeout_s=0.3)
    assert code == CLOSE_IDLE and "--idle-timeout-s" in reason


def test_streams_per_address_behind_a_trusted_proxy():
    """--max-clients-per-ip 2 behind a proxy at 127.0.0.1: a third stream of 203.0.113.7 is refused, one of
    another address is not; loopback clients are exempt, and X-Forwarded-For of an untrusted peer is ignored."""
    async def fn(url, port, server):
        conns = [await open_started(url, f) for f in ("10.0.0.1, 203.0.113.7", "203.0.113.7", "203.0.113.7",
                                                    "203.0.113.8", None, None, None)]
        for ws, _ in conns:
            await ws.close()
        return [r for _, r in conns]

    got = serve_with(lambda langs: FakeDriver(), fn, max_clients_per_ip=2, trusted_proxy="127.0.0.1")
    assert got[:2] == ["ready", "ready"] and got[3:] == ["ready"] * 4
    assert got[2][0] == CLOSE_SERVER_FULL and "--max-clients-per-ip 2" in got[2][1]

    async def untrusted(url, port, server):
        conns = [await open_started(url, "203.0.113.7") for _ in range(3)]
        for ws, _ in conns:
            await ws.close()
        return [r for _, r in conns]

    assert serve_with(lambda langs: FakeDriver(), untrusted, max_clients_per_ip=2,
                      trusted_proxy="10.9.9.9") == ["ready"] * 3


# ---------------------------------------------------------------------------------------------- client errors
def test_malformed_start_is_a_client_error_logged_once_without_traceback(caplog):
    caplog.set_level(logging.INFO, logger="mmst.serve")
    bad = ['{"type": "start", "sample_rate": ' + "9" * 5001 + "}",
           json.dumps({"type": "start", "sample_format": ["x"]}),
           json.dumps({"type": "start", "langs": [["de"]]}),
           json.dumps({"type": "start", "rate": "fast"}),
           json.dumps({"type": "start", "rate": float("nan")})]

    async def fn(url, port, server):
        out = []
        for text in bad:
            async with websockets_client.connect(url) as ws:
                await ws.send(text)
                out.append(await closed_code(ws))
        return out

    got = serve_with(lambda langs: FakeDriver(), fn)
    assert [c for c, _ in got] == [CLOSE_BAD_MESSAGE] * 4 + [CLOSE_UNSUPPORTED]
    assert "malformed JSON" in got[0][1] and "sample_format" in got[1][1] and "langs" in got[2][1]
    lines = [r for r in caplog.records if r.name == "mmst.serve" and "closed" in r.getMessage()]
    assert len(lines) == len(bad) and all(r.exc_info is None for r in caplog.records)


def test_rate_limited_log():
    clock = FakeClock()
    log = logging.getLogger("mmst.test.ratelimit")
    lines = []
    handler = logging.Handler()
    handler.emit = lambda r: lines.append(r.getMessage())
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        rl = RateLimitedLog(log, burst=3, window_s=10.0, clock=clock)
        assert [rl.log(logging.INFO, "bad %d", i) for i in range(5)] == [True, True, True, False, False]
        clock.advance(10.0)
        rl.log(logging.INFO, "bad %d", 5)
    finally:
        log.removeHandler(handler)
    assert lines == ["bad 0", "bad 1", "bad 2", "bad 5 (2 similar line(s) not logged)"]


# ---------------------------------------------------------------------------------------------- failures
def test_an_unexpected_loop_error_closes_its_streams_and_the_loop_goes_on(monkeypatch, caplog):
    """The first tick raises a TypeError outside any stream's step: that tick's stream is closed with
    1011, the traceback is logged once, /healthz still says running and the next stream is served."""
    import mmst.serve.batching as batching

    caplog.set_level(logging.INFO, logger="mmst.serve")
    real = batching.run_stacked
    calls = []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise TypeError("unexpected")
        return real(*a, **k)

    monkeypatch.setattr(batching, "run_stacked", flaky)

    async def fn(url, port, server):
        first = await asyncio.wait_for(stream_audio(url, np.zeros(1600, np.float32), realtime=False), 30)
        second = await asyncio.wait_for(stream_audio(url, np.zeros(3200, np.float32), realtime=False,
                                                     frame_ms=200), 30)
        return first, second, server.scheduler.health()

    first, second, health = serve_with(lambda langs: FakeDriver(), fn)
    assert first.close_code == CLOSE_INTERNAL_ERROR
    assert second.close_code == 1000 and [w["text"] for w in second.words] == ["w3200"]
    assert health["loop"] == "running" and health["errors"] == 1 and "TypeError" in health["last_error"]
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 1 and "scheduling loop" in tracebacks[0].getMessage()


@pytest.fixture(scope="module")
def factory(tiny_system):
    return driver_factory(tiny_system)


def _request_class(name: str):
    from mmst.models.decoder import DecoderStep
    from mmst.models.encoder import EncoderBlock
    from mmst.simultaneous.frontend_request import FrontEndFrames
    from mmst.simultaneous.vad import VadWindows

    return {"VadWindows": VadWindows, "FrontEndFrames": FrontEndFrames, "EncoderBlock": EncoderBlock,
            "DecoderStep": DecoderStep}[name]


@pytest.fixture(scope="module")
def three_streams(factory):
    """Three overlapping cuts of the speech and the long-form driver's words on each."""
    make_driver, langs = factory
    x = speech()
    audios = [x[:len(x) // 2], x[len(x) // 4:], x[len(x) // 2:]]
    return audios, [[(lang, t, s, round(ms, 1)) for lang, t, s, ms in offline_words(make_driver, langs, a)]
                    for a in audios]


@pytest.mark.parametrize("kind", ["VadWindows", "FrontEndFrames", "EncoderBlock", "DecoderStep"])
def test_a_stream_whose_model_call_fails_fails_alone(factory, three_streams, monkeypatch, caplog, kind):
    """Three streams stepped together; every call of one kind (Silero VAD windows, front-end frames,
    encoder block, decoder step) with a request of the second stream raises (a stacked one after it has
    changed every stream's state: VAD state, conv buffers, key/value caches). The stacked calls are
    recomputed one by one with each request's ``save_state`` restored: the second stream is closed with
    1011 and one log line, the others get exactly the long-form driver's words."""
    cls = _request_class(kind)
    make_driver, langs = factory
    audios, want = three_streams
    orig_run, orig_stacked = cls.run, cls.run_stacked.__func__

    def run(self):
        if getattr(self, "poisoned", False):
            raise RuntimeError(f"poisoned {kind}")
        return orig_run(self)

    def run_stacked(klass, reqs):
        out = orig_stacked(klass, reqs)
        if any(getattr(r, "poisoned", False) for r in reqs):
            raise RuntimeError(f"poisoned {kind}")
        return out

    monkeypatch.setattr(cls, "run", run)
    monkeypatch.setattr(cls, "run_stacked", classmethod(run_stacked))
    made = []

    def poisoning(gen):
        """Marks the requests of the poisoned kind that a driver's step yields."""
        try:
            req = next(gen)
            while True:
                if isinstance(req, cls):
                    req.poisoned = True
                try:
                    res = yield req
                except Exception as e:  # noqa: BLE001 - passed into the step
                    req = gen.throw(e)
                else:
                    req = gen.send(res)
        except StopIteration as stop:
            return stop.value

    def make(langs_):
        d = make_driver(langs_)
        made.append(d)
        if len(made) == 2:
            d.push_steps = lambda samples, _d=d: poisoning(type(_d).push_steps(_d, samples))
            d.finish_steps = lambda _d=d: poisoning(type(_d).finish_steps(_d))
        return d

    caplog.set_level(logging.INFO)

    async def fn(url, port, server):
        gate = threading.Event()
        held = asyncio.ensure_future(server.scheduler.run(gate.wait, 120.0))
        clients = []
        for a in audios:  # connected one after the other: the second driver is the poisoned one
            clients.append(asyncio.ensure_future(stream_audio(url, a, realtime=False, sample_format="float32")))
            await until(lambda n=len(clients): len(made) == n, "the stream's driver")
        await until(lambda: len(server.scheduler.sessions) == 3 and all(s.ended for s in server.scheduler.sessions),
                     "all audio of the three streams")
        gate.set()
        await held
        return await asyncio.gather(*clients), server.scheduler.stack.retried

    try:
        res, retried = serve_with(make, fn, langs=langs)
    finally:
        for d in made:
            d.__dict__.pop("push_steps", None)
            d.__dict__.pop("finish_steps", None)
    assert res[1].close_code == CLOSE_INTERNAL_ERROR and "RuntimeError" in res[1].close_reason
    for i in (0, 2):
        assert res[i].close_code == 1000, (i, res[i].close_code, res[i].close_reason)
        assert [(w["lang"], w["text"], w["segment"], w["start_ms"]) for w in res[i].words] == want[i], f"stream {i}"
    assert retried >= 1
    failed = [r for r in caplog.records if "translation failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is None


# ---------------------------------------------------------------------------------------------- smaller
def test_driver_pool_keys_by_language_set_and_caps_idle(factory):
    make_driver, langs = factory
    d = make_driver(["es", "de"])
    assert list(d.translator.tgt_langs) == ["de", "es"]
    make_driver.release(d)
    assert make_driver(["de", "es"]) is d
    old = make_driver.max_idle
    make_driver.max_idle = 1
    try:
        a, b = make_driver(["de"]), make_driver(["de"])
        make_driver.release(a)
        make_driver.release(b)
        assert make_driver.idle() == 1 and make_driver(["de"]) is b
    finally:
        make_driver.max_idle = old
        make_driver.release(d)


def test_saved_audio_is_written_as_it_comes_under_unique_names(tmp_path):
    """Two server runs in one directory keep both streams' audio; while a stream is open its audio is on
    disk already (``.wav.part``)."""
    import soundfile as sf

    x = (np.arange(8000, dtype=np.float32) % 100) / 200.0

    async def fn(url, port, server):
        async with websockets_client.connect(url) as ws:
            await ws.send(START)
            await ws.recv()
            await ws.send(encode_audio(x, "int16"))
            await until(lambda: server.scheduler.steps >= 1 and list(tmp_path.glob("*.wav.part")), "a step")
            part = next(tmp_path.glob("*.wav.part"))
            size = part.stat().st_size
            await ws.send(END)
            await closed_code(ws)
        await until(lambda: not server.clients, "the stream to be freed")
        return size

    sizes = [serve_with(lambda langs: FakeDriver(), fn, save_audio_dir=tmp_path) for _ in range(2)]
    files = sorted(tmp_path.glob("*.wav"))
    assert len(files) == 2 and not list(tmp_path.glob("*.part"))
    assert all(s >= 44 + 4 * 5120 for s in sizes)  # at least the first step's 320 ms
    for f in files:
        pcm, sr = sf.read(f, dtype="float32")
        assert sr == 16000 and np.abs(pcm - np.round(x * 32768) / 32768).max() < 1e-6
