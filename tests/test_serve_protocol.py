"""Tests for mmst.serve.protocol and mmst.serve.client.encode_audio (no server, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from mmst.serve.client import encode_audio
from mmst.serve.protocol import (
    CLOSE_BAD_MESSAGE,
    CLOSE_UNSUPPORTED,
    ProtocolError,
    clip_reason,
    decode_audio,
    parse_start,
    parse_text,
)

LANGS = ["de", "es", "fr", "ja"]


def test_parse_start_defaults_and_subset():
    req = parse_start({"type": "start"}, LANGS)
    assert req.langs == tuple(LANGS) and req.sample_rate == 16000 and req.sample_format == "int16"
    req = parse_start({"type": "start", "langs": ["ja", "de", "ja"], "sample_rate": 44100,
                       "sample_format": "float32"}, LANGS)
    assert req.langs == ("ja", "de") and req.sample_rate == 44100 and req.sample_format == "float32"
    assert parse_start({"type": "start", "langs": "es,fr"}, LANGS).langs == ("es", "fr")


@pytest.mark.parametrize("msg, code, words", [
    ({"langs": ["xx"]}, CLOSE_UNSUPPORTED, "xx"),
    ({"langs": []}, CLOSE_BAD_MESSAGE, "langs"),
    ({"langs": [3]}, CLOSE_BAD_MESSAGE, "langs"),
    ({"sample_rate": 12345}, CLOSE_UNSUPPORTED, "12345"),
    ({"sample_rate": "16000"}, CLOSE_BAD_MESSAGE, "integer"),
    ({"sample_rate": True}, CLOSE_BAD_MESSAGE, "integer"),
    ({"sample_format": "mp3"}, CLOSE_UNSUPPORTED, "mp3"),
])
def test_parse_start_rejects(msg, code, words):
    with pytest.raises(ProtocolError) as e:
        parse_start({"type": "start", **msg}, LANGS)
    assert e.value.code == code and words in e.value.reason


@pytest.mark.parametrize("text", ["{", "[1, 2]", '{"type": 3}', '"start"', "{}"])
def test_parse_text_rejects(text):
    with pytest.raises(ProtocolError) as e:
        parse_text(text)
    assert e.value.code == CLOSE_BAD_MESSAGE


def test_audio_roundtrip_and_partial_samples():
    x = np.array([0.0, 0.5, -0.5, -1.0, 0.999], np.float32)
    assert np.array_equal(decode_audio(encode_audio(x, "float32"), "float32"), x)
    y = decode_audio(encode_audio(x, "int16"), "int16")
    assert np.abs(y - x).max() <= 1 / 32768 and y[3] == -1.0 and y.dtype == np.float32
    with pytest.raises(ProtocolError, match="5 bytes"):
        decode_audio(b"\x00" * 5, "int16")
    with pytest.raises(ProtocolError, match="whole number"):
        decode_audio(b"\x00" * 6, "float32")


def test_clip_reason_fits_a_close_frame():
    r = clip_reason("ü" * 100)
    assert len(r.encode()) <= 123 and r == "ü" * 61


class _EchoDriver:
    """A long-form driver double that writes one word at the end of every push (time = audio so far)."""

    def __init__(self):
        self.n = 0

    def push(self, x):
        from mmst.simultaneous.longform import LongFormWord

        self.n += x.size
        return [LongFormWord("de", f"w{self.n}", 0, self.n / 16.0, 0.0)]

    def finish(self):
        from mmst.simultaneous.longform import SegmentEnd

        return [SegmentEnd(0, 0.0, self.n / 16.0)]


def test_session_maps_words_to_the_frame_that_completed_them():
    from mmst.serve.protocol import StartRequest
    from mmst.serve.session import StreamSession

    s = StreamSession(_EchoDriver(), StartRequest(("de",), 16000, "int16"), clock=lambda: 0.0)
    for i, n in enumerate([1600, 1600, 800]):  # frames end at 100, 200, 250 ms; received at t = 10, 11, 12 s
        s.add_audio(np.zeros(n, np.float32), recv_time=10.0 + i)
    assert s.recv_time_for(100.0) == 10.0 and s.recv_time_for(100.1) == 11.0 and s.recv_time_for(250.0) == 12.0
    assert s.recv_time_for(0.0) == 10.0 and s.recv_time_for(999.0) == 12.0
    ev = s.step()  # the three frames in one tick: one push of 4000 samples
    assert [e["text"] for e in ev] == ["w4000"] and ev[0]["start_ms"] == 250.0 and ev[0]["_recv_t"] == 12.0
    s.end()
    ev = s.step()
    assert s.finished and ev == [{"type": "segment_end", "segment": 0, "start_ms": 0.0, "end_ms": 250.0}]
    s.latencies_ms += [5.0, 15.0]
    summ = s.summary()
    assert summ["words"] == {"de": 1} and summ["segments"] == 1 and summ["audio_ms"] == 250.0
    assert summ["added_latency_ms"]["p50"] == 10.0


def test_session_resamples_and_flushes_at_end():
    from mmst.serve.protocol import StartRequest
    from mmst.serve.session import StreamSession

    s = StreamSession(_EchoDriver(), StartRequest(("de",), 44100, "float32"))
    for _ in range(10):
        s.add_audio(np.zeros(4410, np.float32))  # 1 s at 44.1 kHz
    s.end()
    assert s.n_samples == 16000 and s.take_pending().size == 16000


# ---------------------------------------------------------------------------------------------- fuzzing
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
START_FIELDS = st.fixed_dictionaries({}, optional={k: JSON for k in ("langs", "sample_rate", "sample_format", "rate")})
FUZZ = settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(fields=START_FIELDS)
def test_any_start_message_is_accepted_or_a_client_error(fields):
    """Whatever JSON values the fields hold: a valid request, or a ProtocolError with a client code."""
    try:
        req = parse_start({"type": "start", **fields}, LANGS)
    except ProtocolError as e:
        assert e.code in (CLOSE_BAD_MESSAGE, CLOSE_UNSUPPORTED) and e.reason
    else:
        assert set(req.langs) <= set(LANGS) and req.sample_format in ("int16", "float32") and 0 < req.rate <= 10


@FUZZ
@given(text=st.text(max_size=60) | JSON.map(lambda v: __import__("json").dumps(v)))
def test_any_text_message_parses_or_is_a_client_error(text):
    try:
        msg = parse_text(text)
    except ProtocolError as e:
        assert e.code == CLOSE_BAD_MESSAGE
    else:
        assert isinstance(msg["type"], str)


@pytest.mark.parametrize("text, words", [
    ('{"type": "start", "sample_rate": ' + "1" * 5001 + "}", "too long"),
    ("[" * 100000 + "]" * 100000, "malformed JSON"),
])
def test_parse_text_huge_numbers_and_deep_nesting(text, words):
    with pytest.raises(ProtocolError) as e:
        parse_text(text)
    assert e.value.code == CLOSE_BAD_MESSAGE and words in e.value.reason


@pytest.mark.parametrize("msg, code, words", [
    ({"sample_format": ["x"]}, CLOSE_BAD_MESSAGE, "sample_format"),
    ({"sample_format": {"a": 1}}, CLOSE_BAD_MESSAGE, "sample_format"),
    ({"rate": "2"}, CLOSE_BAD_MESSAGE, "rate"),
    ({"rate": 0}, CLOSE_UNSUPPORTED, "rate"),
    ({"rate": 11}, CLOSE_UNSUPPORTED, "--max-rate"),
])
def test_parse_start_checks_types_first(msg, code, words):
    with pytest.raises(ProtocolError) as e:
        parse_start({"type": "start", **msg}, LANGS)
    assert e.value.code == code and words in e.value.reason


def test_take_pending_is_bounded_and_keeps_the_rest_in_order():
    from mmst.serve.protocol import StartRequest
    from mmst.serve.session import StreamSession

    s = StreamSession(_EchoDriver(), StartRequest(("de",), 16000, "float32"))
    for i in range(3):
        s.add_audio(np.arange(i * 1000, (i + 1) * 1000, dtype=np.float32))
    a = s.take_pending(max_samples=1500)
    b = s.take_pending(max_frames=1, max_samples=1500)
    c = s.take_pending(max_samples=1500)
    assert np.array_equal(a, np.arange(1500)) and np.array_equal(b, np.arange(1500, 2000))
    assert np.array_equal(c, np.arange(2000, 3000)) and s.take_pending().size == 0
    s.add_audio(np.zeros(8000, np.float32))
    assert [e["text"] for e in s.step(max_samples=5120)] == ["w5120"] and s.pending_samples() == 2880
