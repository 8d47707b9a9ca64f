"""Helpers of the mmst-serve tests (not a test module): espeak-ng speech, the tiny system's server options,
an in-process server. The subprocess server is :func:`mmst.serve.process.server_process`.

The tiny checkpoint of ``tiny_system`` is untrained: it writes arbitrary pieces, capped by
``--max-len-b`` per segment, which is enough to check that words flow, are routed per language and
equal an offline run of the long-form driver. The scripted doubles at the end (:class:`FakeClock`,
:class:`FakeDriver`) make the limits' tests exact and independent of the machine's speed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from mmst.serve.server import ServerConfig, TranslationServer
from mmst.simultaneous.longform import LongFormWord, SegmentEnd

REPO = Path(__file__).resolve().parents[1]
SENTENCES = ["the black woman buys the famous letter", "the doctor eats the apple",
             "the tired student reads a big book"]


def speech(pause_s: float = 0.6) -> np.ndarray:
    """English espeak-ng speech of :data:`SENTENCES` separated by silences (float32, 16 kHz; skips
    the test without espeak-ng)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (tools/ensure_system_packages.sh installs it)")
    from mmst.corpora.synthetic.tts import Speaker, synthesize

    spk = Speaker("en-us", "m1", 170, 50)
    gap = np.zeros(int(pause_s * 16000), np.float32)
    parts = [gap]
    for s in SENTENCES:
        parts += [synthesize(s, spk), gap]
    return np.concatenate(parts)


def serve_args(system: dict, *extra: str) -> list[str]:
    """``mmst-serve`` options for the tiny system (short writes per segment)."""
    return ["--model", str(system["ckpt"]), "--data", str(system["data"]), "--max-len-b", "6",
            "--waitk-lagging", "2", *extra]


def driver_factory(system: dict, *extra: str):
    """``(make_driver, langs)`` exactly as ``mmst-serve`` builds it from :func:`serve_args`."""
    from mmst.serve.cli import build_parser, make_driver_factory

    return make_driver_factory(build_parser().parse_args(serve_args(system, *extra)))


def offline_words(make_driver, langs: list[str], audio: np.ndarray) -> list[tuple[str, str, int, float]]:
    """``(lang, text, segment, time_ms)`` of every word when the long-form driver reads ``audio`` in one go."""
    d = make_driver(langs)
    evs = d.push(audio) + d.finish()
    return [(e.lang, e.text, e.segment, e.time_ms) for e in evs if isinstance(e, LongFormWord)]


def longform_cli_words(system: dict, wav: Path, langs: list[str], out: Path) -> list[tuple[str, str, int, float]]:
    """``(lang, text, segment, time_ms)`` of every word of ``eval/longform_eval.py`` on ``wav``, with the
    policy and limits of :func:`serve_args` (languages in ``langs`` order)."""
    import json

    cmd = [sys.executable, str(REPO / "eval" / "longform_eval.py"), "--model", str(system["ckpt"]),
           "--data", str(system["data"]), "--audio", str(wav), "--tgt-langs", ",".join(langs),
           "--max-len-b", "6", "--waitk-lagging", "2", "--out", str(out), "--no-progress"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    words = []
    for lang in langs:
        for line in (out / lang / "hypothesis.jsonl").read_text().splitlines():
            w = json.loads(line)
            words.append((lang, w["text"], w["segment"], round(w["time_ms"], 1)))
    return words


# ---------------------------------------------------------------------------------------------- scripted
class FakeClock:
    """A clock that only moves when told (compute time charged by :class:`FakeDriver`)."""

    def __init__(self) -> None:
        self.t = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        with self._lock:
            self.t += dt


class FakeDriver:
    """A long-form driver double: each push writes one word ``w<samples so far>`` at the end of the audio
    pushed, and costs ``cost`` seconds of the fake clock per second of audio; ``gate`` (a threading.Event)
    makes its first push wait for the test (the compute thread is then busy with it)."""

    def __init__(self, clock: FakeClock | None = None, cost: float = 0.0, gate: threading.Event | None = None):
        self.clock, self.cost, self.gate = clock, cost, gate
        self.entered = threading.Event()
        self.n = 0
        self.pushes: list[int] = []

    def push(self, x):
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(60), "the test did not release the push"
            self.gate = None
        self.n += x.size
        self.pushes.append(x.size)
        if self.clock is not None:
            self.clock.advance(self.cost * x.size / 16000)
        return [LongFormWord("de", f"w{self.n}", 0, self.n / 16.0, 0.0)]

    def finish(self):
        return [SegmentEnd(0, 0.0, self.n / 16.0)]


def serve_with(make_driver, fn, langs=("de",), clock=None, host="127.0.0.1", **cfg):
    """``fn(url, port, server)`` against an in-process server on ``host`` (a free port); returns its result."""

    async def main():
        server = TranslationServer(make_driver, ServerConfig(langs=list(langs), **cfg),
                                   **({"clock": clock} if clock is not None else {}))
        async with server.running(host, 0) as srv:
            port = srv.sockets[0].getsockname()[1]
            return await fn(f"ws://127.0.0.1:{port}/ws", port, server)

    return asyncio.run(main())


START = json.dumps({"type": "start", "sample_rate": 16000, "sample_format": "int16"})
END = json.dumps({"type": "end"})


async def until(cond, what: str, tries: int = 6000):
    for _ in range(tries):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def closed_code(ws, timeout_s: float = 30.0):
    """Read until the server closes (at most ``timeout_s``); ``(code, reason)``."""
    async def drain():
        try:
            async for _ in ws:
                pass
        except Exception:  # noqa: BLE001 - closed abnormally
            pass
    await asyncio.wait_for(drain(), timeout_s)
    return ws.close_code, ws.close_reason


async def open_started(url: str, fwd: str | None = None):
    """Connect (as ``fwd`` in ``X-Forwarded-For`` when given), send ``start``; ``(ws, "ready")``, or
    ``(ws, (close code, reason))`` when refused."""
    from websockets.asyncio.client import connect

    ws = await connect(url, additional_headers={"X-Forwarded-For": fwd} if fwd else None)
    try:
        await ws.send(START)
        return ws, json.loads(await ws.recv())["type"]
    except Exception:  # noqa: BLE001 - refused
        return ws, (ws.close_code, ws.close_reason)
