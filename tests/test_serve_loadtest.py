"""The load measurement's bookkeeping: the latency a client measures (from the due time of the audio a word
needed to the word's arrival), its percentiles, load points run several times, and the table of the docs.

Worked cases by hand; one test streams 0.3 s at real-time pace to an in-process server with a scripted
driver (about 0.7 s of real clock).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from serve_fixtures import FakeDriver, serve_with

import mmst.serve.client as client_mod
from mmst.serve.client import ClientLatency, StreamResult, stream_audio
from mmst.serve.loadtest import max_realtime_clients, repeated_point, spread, summarize_clients

REPO = Path(__file__).resolve().parents[1]


def test_client_latency_by_hand():
    """Ten 100 ms frames of a real-time client that started speaking at t0 = 1000 s: frame k (ending at
    k x 100 ms) is due at 1000 + 0.1 k s, whenever it was sent. Words and the frame each needed:
    start_ms 100 -> frame 1 (due 1000.1), received 1000.25: 150 ms; start_ms 250 -> frame 3 (the first
    reaching 250, due 1000.3), received 1000.42: 120 ms; start_ms 300.04 (the server's value rounded to
    0.1 ms of 300) -> frame 3, received 1000.5: 200 ms; start_ms 1200, past the last frame -> frame 10 (due
    1001.0), received 1001.3: 300 ms. p50 over the four = (150 + 200) / 2 = 175; p95 (numpy's linear
    interpolation on 120, 150, 200, 300: position 0.95 x 3 = 2.85) = 200 + 0.85 x 100 = 285."""
    lat = ClientLatency()
    assert math.isnan(lat.word(100.0, 1000.0))  # nothing sent yet
    for k in range(1, 11):
        lat.frame(100.0 * k, 1000.0 + 0.1 * k)
    lags = [lat.word(100.0, 1000.25), lat.word(250.0, 1000.42), lat.word(300.04, 1000.5), lat.word(1200.0, 1001.3)]
    assert lags == pytest.approx([150.0, 120.0, 200.0, 300.0], abs=0.05)
    s = summarize_clients([StreamResult(words=[{}] * 4, lags_ms=lags, send_late_ms=[0.0, 40.0, 0.0, 10.0],
                                        close_code=1000, summary={"rtf": 0.1, "audio_ms": 1000.0})], 1.0)
    assert s["client_latency_ms_p50"] == pytest.approx(175.0, abs=0.05)
    assert s["client_latency_ms_p95"] == pytest.approx(285.0, abs=0.05)
    # send lateness 0, 0, 10, 40: p95 at position 2.85 = 10 + 0.85 x 30 = 35.5
    assert s["send_late_ms_p95"] == pytest.approx(35.5) and s["send_late_ms_max"] == 40.0
    with pytest.raises(ValueError, match="not after the previous frame"):
        lat.frame(1000.0, 1002.0)


def test_a_frame_sent_late_counts_from_when_it_was_due(monkeypatch):
    """A real-time client whose process stalls 350 ms while encoding its first 100 ms frame (as a client
    short of CPU, or a send waiting for the server to read): frames k = 1, 2, 3 are due at 0.1 k s but all
    go out after 0.45 s. The scripted driver writes a word at the end of the audio of each push (the
    server may push frames 1 and 2 together), so a word written after frame k cannot arrive before
    0.45 s: at least 450 - 100 k ms after its audio was spoken; the last word (start_ms 300) at least
    150 ms. Timed from the send instead, it would come out at a few ms."""
    stalled = []
    encode = client_mod.encode_audio

    def slow_first(samples, fmt):
        if not stalled:
            stalled.append(True)
            time.sleep(0.35)
        return encode(samples, fmt)

    monkeypatch.setattr(client_mod, "encode_audio", slow_first)

    async def fn(url, port, server):
        return await stream_audio(url, np.zeros(4800, np.float32), frame_ms=100.0, realtime=True)

    res = serve_with(lambda langs: FakeDriver(), fn, tick_ms=0.0)
    assert res.close_code == 1000 and stalled and res.words[-1]["start_ms"] == 300.0
    for w, lag in zip(res.words, res.lags_ms, strict=True):
        assert lag >= 450.0 - w["start_ms"] - 0.1, (w, lag)
    # frame 1 was on time (the stall came after its due time was checked); frames 2 and 3 went out late
    assert len(res.send_late_ms) == 3 and res.send_late_ms[1] >= 249.9 and res.send_late_ms[2] >= 149.9


def test_repeated_load_point_by_hand():
    """Three runs of a point with client p95 280, 320, 250 ms: median 280, spread 250-320; real time
    (median < 300, RTF < 1, no failure). The same with one failed client, or with a median of 310, is not.
    Max real-time clients stops at the first point that fails: 1, 4 pass, 8 fails, 16 passes -> 4."""
    def run(p95, failed=0, rtf=0.5):
        return {"client_latency_ms_p95": p95, "added_latency_ms_p95": 100.0, "rtf_max": rtf, "failed": failed}

    point = repeated_point([run(280.0), run(320.0), run(250.0)], 300.0)
    assert point["client_latency_ms_p95"] == {"median": 280.0, "min": 250.0, "max": 320.0, "n": 3}
    assert point["realtime"] and point["realtime_added_p95"] and point["failed"] == 0
    assert not repeated_point([run(280.0), run(320.0, failed=1), run(250.0)], 300.0)["realtime"]
    assert not repeated_point([run(280.0), run(290.0, rtf=1.2), run(250.0)], 300.0)["realtime"]
    assert not repeated_point([run(310.0), run(320.0), run(250.0)], 300.0)["realtime"]
    assert spread([None, 2.0, 4.0]) == {"median": 3.0, "min": 2.0, "max": 4.0, "n": 2} and spread([None]) is None
    assert max_realtime_clients({16: True, 1: True, 8: False, 4: True}) == 4
    assert max_realtime_clients({1: False, 4: True}) == 0


def test_serve_table_shows_medians_spreads_and_goals():
    """The docs' table of a repeated run: the median client p50 / p95 and the p95's min-max per point,
    the cost pairs with their median, the abuse source, and a goal whose value is missing as not measured."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        from docs_render.serving import serve_table
    finally:
        sys.path.remove(str(REPO / "tools"))
    sp = lambda a, b, c: {"median": b, "min": a, "max": c, "n": 3}  # noqa: E731
    row = {"batching": "tick", "n": 8, "flood": False, "compute_workers": 2, "client_latency_ms_p50": sp(90, 100, 110),
           "client_latency_ms_p95": sp(250, 280, 320), "added_latency_ms_p50": sp(40, 50, 60),
           "added_latency_ms_p95": sp(90, 120, 130), "send_late_ms_p95": sp(1, 2, 3), "rtf_max": sp(0.1, 0.2, 0.3),
           "server_cpu_pct": sp(30, 35, 40), "cpu_s_per_audio_s": sp(0.04, 0.05, 0.06), "clients_cpu_s": sp(1, 1, 1),
           "peak_rss_mib": sp(400, 410, 420), "words_per_s": sp(80, 81, 82), "realtime": True,
           "streams_per_call": {"VadWindows": 4.0}, "reps": [{}, {}, {}]}
    summary = {"max_realtime_clients_client_p95": 8, "max_realtime_clients_added_p95": 8,
               "batched_over_unbatched_cost_8_clients": 0.65, "abuse_rss_growth_mib_max": None,
               "abuse_realtime_words_exact": True,
               "goals": {"max_realtime_clients_client_p95": {"goal": ">= 16", "met": False},
                         "abuse_rss_growth_mib_max": {"goal": "<= 64", "met": None}}}
    d = {"summary": summary, "rows": {"tick/8": row},
         "cost_pairs": {"8": {"ratio": sp(0.6, 0.65, 0.7), "pairs": [{"tick": 0.05, "off": 0.08, "ratio": 0.625}]}},
         "abuse_results": {"file": "docs/results/serve_abuse.json", "date": "2026-12-04T15:47:03+00:00",
                           "git_commit": "1a1746efafd676e5ed016414ffa07db989c23174", "changed_since": []},
         "config": {"reps": 3, "realtime_p95_ms": 300.0, "seconds_per_client": 15.0, "cpus": 2}}
    text = serve_table(d)
    assert "| tick | 2 | 8 | 3 | 100 / 280 | 250-320 | 50 / 120 | 2 | 0.300 | 35% | 0.050 |" in text
    assert "8 clients: 0.050/0.080 = 0.62 (median 0.65, 0.60-0.70)" in text
    assert "`docs/results/serve_abuse.json` (`bench/bench_serve_abuse.py`, run on 2026-12-04 at commit `1a1746efaf`; " \
           "the code it measured was unchanged when this run started; the real-time client's words were exact " \
           "next to every abusive client)" in text
    assert "| `max_realtime_clients_client_p95` | >= 16 | 8 | **missed** |" in text
    assert "| `abuse_rss_growth_mib_max` | <= 64 | - | not measured |" in text
    summary["abuse_rss_growth_mib_max"] = 5.5
    summary["goals"]["abuse_rss_growth_mib_max"]["met"] = True
    d["abuse_results"]["changed_since"] = ["mmst/serve/server.py"]
    assert ("| `abuse_rss_growth_mib_max` | <= 64 | 5.5 (from a run whose code has changed since) | met |"
            in serve_table(d))
