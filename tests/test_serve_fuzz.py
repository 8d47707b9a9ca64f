"""Fuzzing mmst-serve: clients that send random JSON, random binary frames and random interleavings of
start / audio / end connect while one good client streams speech; the server stays up, the good client's
words equal the long-form CLI's on the same PCM, no client error is logged with a traceback, and the
server's memory stays bounded. Example counts are small and derandomized (the same scripts every run).
"""

from __future__ import annotations

import asyncio
import json
import logging

import numpy as np
import pytest
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_fixtures import driver_factory, longform_cli_words, speech

from mmst.serve.client import encode_audio, stream_audio
from mmst.serve.server import ServerConfig, TranslationServer

websockets_client = pytest.importorskip("websockets.asyncio.client")
psutil = pytest.importorskip("psutil")

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)
START_LIKE = st.fixed_dictionaries({"type": st.sampled_from(["start", "end", "stop", ""])},
                                   optional={k: JSON | st.sampled_from([16000, 44100, "int16", "float32", ["de"], 2])
                                             for k in ("langs", "sample_rate", "sample_format", "rate")})
ACTION = st.one_of(
    st.tuples(st.just("text"), JSON.map(json.dumps)),
    st.tuples(st.just("text"), START_LIKE.map(json.dumps)),
    st.tuples(st.just("text"), st.text(max_size=30)),
    st.tuples(st.just("bytes"), st.binary(max_size=200)),
    st.tuples(st.just("start"), st.just(json.dumps({"type": "start", "sample_format": "float32"}))),
    st.tuples(st.just("audio"), st.integers(1, 4000).map(lambda n: encode_audio(np.zeros(n, np.float32), "float32"))),
    st.tuples(st.just("end"), st.just(json.dumps({"type": "end"}))),
    st.tuples(st.just("abort"), st.none()),
)
SCRIPTS = st.lists(st.lists(ACTION, min_size=1, max_size=6), min_size=3, max_size=3)


@pytest.fixture(scope="module")
def setup(tiny_system, tmp_path_factory):
    """The server's drivers, a short stream of speech and the long-form CLI's words on its PCM."""
    make_driver, langs = driver_factory(tiny_system)
    x = speech()[: 16000 * 3]
    out = tmp_path_factory.mktemp("fuzz")
    sf.write(out / "good.wav", x, 16000, subtype="FLOAT")
    want = longform_cli_words(tiny_system, out / "good.wav", langs, out / "cli")
    assert want
    return make_driver, langs, x, want, {"rss0": None}


async def fuzz_client(url: str, script: list) -> None:
    try:
        async with websockets_client.connect(url) as ws:
            for kind, payload in script:
                if kind == "abort":
                    ws.transport.abort()
                    return
                await ws.send(payload)
            await asyncio.wait_for(ws.close(), 10)
    except Exception:  # noqa: BLE001 - the server closes bad clients; that is the point
        pass


@settings(max_examples=8, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(scripts=SCRIPTS)
def test_fuzzing_clients_next_to_a_good_stream(setup, scripts, caplog):
    make_driver, langs, x, want, mem = setup
    caplog.set_level(logging.INFO, logger="mmst.serve")

    async def main():
        server = TranslationServer(make_driver, ServerConfig(langs=langs, start_timeout_s=2.0, idle_timeout_s=2.0,
                                                             max_message_bytes=64 * 1024))
        async with server.running("127.0.0.1", 0) as srv:
            url = f"ws://127.0.0.1:{srv.sockets[0].getsockname()[1]}/ws"
            good, *_ = await asyncio.gather(stream_audio(url, x, realtime=False, sample_format="float32"),
                                            *(fuzz_client(url, s) for s in scripts))
            for _ in range(1000):  # every fuzzing connection has been freed
                if not server.clients:
                    break
                await asyncio.sleep(0.01)
            return good, server.scheduler.health(), len(server.clients)

    good, health, left = asyncio.run(main())
    assert good.close_code == 1000
    by_lang = sorted(((w["lang"], w["text"], w["segment"], w["start_ms"]) for w in good.words),
                     key=lambda w: langs.index(w[0]))
    assert by_lang == want
    assert health["loop"] == "running" and health["errors"] == 0 and left == 0
    assert not [r for r in caplog.records if r.exc_info is not None]
    rss = psutil.Process().memory_info().rss
    if mem["rss0"] is None:
        mem["rss0"] = rss
    assert (rss - mem["rss0"]) / 2**20 < 100, f"RSS grew {(rss - mem['rss0']) / 2**20:.0f} MiB"
