"""Tests for mmst-serve (mmst.serve.*): words equal the long-form driver's, every fault closes one
connection with its code while the other streams go on, refusals, freeing, the CLI.

An in-process server (asyncio) with the untrained tiny checkpoint of ``tiny_system`` and espeak-ng speech.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import weakref

import numpy as np
import pytest
import soundfile as sf
from serve_fixtures import driver_factory, offline_words, serve_args, speech

from mmst.serve.client import encode_audio, stream_audio
from mmst.serve.process import server_process
from mmst.serve.protocol import (
    CLOSE_BAD_MESSAGE,
    CLOSE_SERVER_FULL,
    CLOSE_SLOW_READER,
    CLOSE_TOO_BIG,
    CLOSE_UNAUTHORIZED,
    CLOSE_UNSUPPORTED,
)
from mmst.serve.server import ServerConfig, TranslationServer

websockets_client = pytest.importorskip("websockets.asyncio.client")


@pytest.fixture(scope="module")
def factory(tiny_system):
    return driver_factory(tiny_system)


@pytest.fixture(scope="module")
def audio():
    return speech()


@pytest.fixture(scope="module")
def expected(factory, audio):
    make_driver, langs = factory
    words = offline_words(make_driver, langs, audio)
    assert {w[0] for w in words} == set(langs), "the tiny model must write in every language"
    return words


def run_server(factory, fn, **cfg):
    """``fn(url, server)`` against an in-process server on a free port; returns its result."""
    make_driver, langs = factory

    async def main():
        server = TranslationServer(make_driver, ServerConfig(langs=langs, **cfg))
        async with server.running("127.0.0.1", 0) as srv:
            url = f"ws://127.0.0.1:{srv.sockets[0].getsockname()[1]}/ws"
            return await fn(url, server)

    return asyncio.run(main())


def as_tuples(result):
    return [(w["lang"], w["text"], w["segment"], w["start_ms"]) for w in result.words]


@pytest.mark.parametrize("batching", ["tick", "off"])
def test_words_equal_the_long_form_driver(factory, audio, expected, batching):
    async def fn(url, server):
        # two concurrent streams, one in real-time-like 100 ms frames, one in uneven frames
        a = stream_audio(url, audio, frame_ms=100, realtime=False, sample_format="float32")
        b = stream_audio(url, audio, frame_ms=37, realtime=False, sample_format="float32")
        return await asyncio.gather(a, b), server.stats()

    (ra, rb), stats = run_server(factory, fn, batching=batching, compute_workers=2, worker_min_streams=1)  # one stream per thread
    want = [(lang, text, seg, round(t, 1)) for lang, text, seg, t in expected]
    for r in (ra, rb):
        assert r.close_code == 1000 and r.summary is not None
        assert as_tuples(r) == want
        assert r.summary["words"] == {lang: sum(w[0] == lang for w in want) for lang in factory[1]}
        assert r.summary["segments"] == len(r.segments) >= 2
        assert r.summary["audio_ms"] == pytest.approx(len(audio) / 16.0, abs=0.1)
        assert all(w["emit_ms"] >= 0 for w in r.words)
    if batching == "off":
        assert stats["steps"] >= 2 * len(audio) // 1600  # one step per frame
    else:
        assert stats["ticks"] <= stats["steps"]


def test_resampled_int16_input_is_translated_as_saved(factory, tmp_path):
    """44.1 kHz int16 in: the server resamples; the PCM it saved, read by the driver offline, gives the
    same words."""
    import soxr

    x16 = speech()
    x44 = soxr.resample(x16, 16000, 44100).astype(np.float32)

    async def fn(url, server):
        return await stream_audio(url, x44, 44100, frame_ms=80, realtime=False, sample_format="int16",
                                  langs=["es"])

    r = run_server(factory, fn, save_audio_dir=tmp_path)
    saved = sorted(tmp_path.glob("*.wav"))
    assert r.close_code == 1000 and len(saved) == 1
    pcm, sr = sf.read(saved[0], dtype="float32")
    assert sr == 16000 and abs(len(pcm) - len(x16)) <= 2
    want = offline_words(factory[0], ["es"], pcm)
    assert want and as_tuples(r) == [(lang, t, s, round(ms, 1)) for lang, t, s, ms in want]


async def _raw(url, first=None, then=(), **kw):
    """Open a connection, send ``first`` then ``then`` (str = text, bytes = binary); wait for the close."""
    async with websockets_client.connect(url, **kw) as ws:
        try:
            for m in ([first] if first is not None else []) + list(then):
                await ws.send(m)
            async for _ in ws:
                pass
        except Exception:  # noqa: BLE001 - the server may close while we send
            pass
    return ws.close_code, ws.close_reason


START = json.dumps({"type": "start", "sample_rate": 16000, "sample_format": "int16"})


def test_bad_clients_are_closed_and_others_unaffected(factory, audio, expected):
    big = b"\x00" * (70 * 1024)

    async def fn(url, server):
        good = asyncio.create_task(stream_audio(url, audio, frame_ms=100, realtime=False))
        bad = await asyncio.gather(
            _raw(url, "{not json"),
            _raw(url, START, [json.dumps({"type": "pause"})]),
            _raw(url, b"\x00\x01"),
            _raw(url, START, [b"\x00\x01\x02"]),
            _raw(url, json.dumps({"type": "start", "sample_rate": 12345})),
            _raw(url, json.dumps({"type": "start", "langs": ["xx"]})),
            _raw(url, START, [START]),
            _raw(url, START, [big]),
            _raw(url, json.dumps({"type": "hello"})),
        )
        return await good, bad, server

    good, bad, server = run_server(factory, fn, max_message_bytes=64 * 1024, max_clients=16)
    codes = [c for c, _ in bad]
    assert codes == [CLOSE_BAD_MESSAGE, CLOSE_BAD_MESSAGE, CLOSE_BAD_MESSAGE, CLOSE_BAD_MESSAGE, CLOSE_UNSUPPORTED,
                     CLOSE_UNSUPPORTED, CLOSE_BAD_MESSAGE, CLOSE_TOO_BIG, CLOSE_BAD_MESSAGE]
    reasons = [r for _, r in bad]
    assert "malformed JSON" in reasons[0] and "'pause'" in reasons[1] and "before the start" in reasons[2]
    assert "3 bytes" in reasons[3] and "12345" in reasons[4] and "xx" in reasons[5] and "twice" in reasons[6]
    assert "expected a start" in reasons[8]
    assert good.close_code == 1000
    assert as_tuples(good) == [(lang, t, s, round(ms, 1)) for lang, t, s, ms in expected]
    assert not server.clients and not server.scheduler.sessions


def test_token_and_max_clients(factory):
    async def fn(url, server):
        out = {"none": await _raw(url, START), "wrong": await _raw(url + "?token=nope", START)}
        async with websockets_client.connect(url + "?token=s3cret") as holder:  # holds the only slot
            await holder.send(START)
            assert json.loads(await holder.recv())["type"] == "ready"
            out["full"] = await _raw(url, START, additional_headers={"Authorization": "Bearer s3cret"})
        out["refused"] = server.refused
        return out

    out = run_server(factory, fn, token="s3cret", max_clients=1)
    assert out["none"][0] == CLOSE_UNAUTHORIZED and out["wrong"][0] == CLOSE_UNAUTHORIZED
    assert "token" in out["none"][1]
    assert out["full"][0] == CLOSE_SERVER_FULL and "--max-clients 1" in out["full"][1]
    assert out["refused"] == 3


def test_slow_reader_is_disconnected(factory, audio):
    """All audio in one message and one step for all of it (no per-step bound): the step writes every
    word at once, more than the send queue holds."""
    async def fn(url, server):
        slow = await _raw(url, START, [encode_audio(audio, "int16"), json.dumps({"type": "end"})])
        fine = await stream_audio(url, np.zeros(0, np.float32), realtime=False)  # the server is still up
        return slow, fine

    (code, reason), fine = run_server(factory, fn, send_queue=3, max_step_samples=10**9)
    assert code == CLOSE_SLOW_READER and "slow reader" in reason
    assert fine.close_code == 1000 and fine.summary["words"] == {"de": 0, "es": 0}


def test_disconnect_mid_stream_frees_the_stream(factory, audio):
    refs = []

    async def fn(url, server):
        for _ in range(3):
            ws = await websockets_client.connect(url)
            await ws.send(START)
            await ws.recv()
            for i in range(5):
                await ws.send(encode_audio(audio[i * 1600:(i + 1) * 1600], "int16"))
            await asyncio.sleep(0.05)
            refs.extend(weakref.ref(c.session) for c in server.clients if c.session is not None)
            ws.transport.abort()  # no close frame: a client that vanished
            for _ in range(200):  # the server notices (a loaded machine may take a while)
                if not server.clients and not server._by_session:
                    break
                await asyncio.sleep(0.05)
        await server.scheduler.run(lambda: None)  # any step still running has ended
        return server

    created = factory[0].created
    server = run_server(factory, fn)
    gc.collect()
    assert len(refs) == 3 and all(r() is None for r in refs)
    assert not server.clients and not server.scheduler.sessions and not server._by_session
    # one stream at a time: one driver serves all three, recycled, not re-made per connection
    assert factory[0].created - created <= 1 and factory[0].idle() >= 1


@pytest.mark.slow
def test_rss_stays_flat_over_200_connections(tiny_system, audio, tmp_path):
    """200 connect / stream / disconnect cycles against the CLI server: its RSS grows < 30 MiB."""
    psutil = pytest.importorskip("psutil")

    async def cycles(port, n):
        url = f"ws://127.0.0.1:{port}/ws"
        for i in range(n):
            ws = await websockets_client.connect(url)
            await ws.send(START)
            await ws.recv()
            start = 9600 + 1600 * (i % 5)  # 0.2 s of speech, at different places
            await ws.send(encode_audio(audio[start:start + 3200], "int16"))
            if i % 4 == 3:
                await ws.send(json.dumps({"type": "end"}))
                async for _ in ws:
                    pass
            else:
                ws.transport.abort()

    with server_process(serve_args(tiny_system), tmp_path / "server.log") as (proc, port):
        p = psutil.Process(proc.pid)
        asyncio.run(cycles(port, 10))  # warm-up: allocator pools, first driver
        rss0 = p.memory_info().rss
        asyncio.run(cycles(port, 200))
        rss1 = p.memory_info().rss
        assert proc.poll() is None
    assert (rss1 - rss0) / 2**20 < 30, f"RSS grew {(rss1 - rss0) / 2**20:.1f} MiB over 200 connections"


def test_cli_help_and_bad_checkpoint(tmp_path):
    import subprocess

    h = subprocess.run([sys.executable, "-m", "mmst.serve", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "--max-clients" in h.stdout and "--token" in h.stdout and "127.0.0.1" in h.stdout
    r = subprocess.run([sys.executable, "-m", "mmst.serve", "--model", str(tmp_path / "none.pt")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "mmst-serve: error:" in r.stderr and "none.pt" in r.stderr
