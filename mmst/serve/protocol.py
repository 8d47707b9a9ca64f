"""The mmst-serve WebSocket protocol: messages, limits and close codes (no I/O here).

One connection = one audio stream. The client speaks first:

1. a JSON text message ``{"type": "start", "langs": ["de", "es"], "sample_rate": 16000,
   "sample_format": "int16", "rate": 1}`` (``langs`` optional: default every language the server decodes;
   ``sample_format`` is ``"int16"`` (little-endian PCM) or ``"float32"`` (little-endian, in [-1, 1]);
   ``rate`` optional, default 1: how many seconds of audio per wall-clock second the client will send at
   most; a file client may declare up to the server's ``--max-rate`` to be translated faster than real
   time), within ``--start-timeout-s`` of the handshake (else 4411);
2. binary messages of mono audio in that format and rate (any length, a whole number of samples; float32
   finite and within ±:data:`MAX_FLOAT_SAMPLE`, else 4400), paced by a token bucket of
   ``--max-ahead-s`` seconds refilled at ``rate`` (:class:`mmst.serve.limits.PaceBucket`; else 4429),
   at least every ``--idle-timeout-s`` seconds (else 4410);
3. ``{"type": "end"}``: the source is finished.

The server answers ``{"type": "ready", "stream", "langs", "sample_rate", "sample_format", "rate",
"max_ahead_s"}`` after ``start``, then sends, as they happen,

* ``{"type": "word", "lang", "text", "segment", "start_ms", "emit_ms", "added_ms"}``: ``start_ms`` =
  source time (ms of audio since the stream's first sample) after which the word was written (its
  delay); ``emit_ms`` = server wall-clock time of sending, in ms since the stream's first audio frame
  arrived (for a client that streams in real time, ``emit_ms - start_ms`` is the caption lag);
  ``added_ms`` = the server's added latency: from receiving the audio frame after which the word
  could be written to sending it;
* ``{"type": "segment_end", "segment", "start_ms", "end_ms"}``: a VAD segment was closed;
* after ``end``: ``{"type": "summary", "words": {lang: n}, "segments", "audio_ms", "compute_ms",
  "rtf", "added_latency_ms": {"p50", "p95"}}``, then it closes the connection normally (1000).

Errors close the connection with a code and a reason (:data:`CLOSE_CODES`); the server stays up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

#: sample rates a client may declare (the server resamples to 16 kHz with soxr)
SUPPORTED_SAMPLE_RATES = (8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000, 88200, 96000)
#: sample formats: name -> (numpy dtype, bytes per sample)
SAMPLE_FORMATS = {"int16": (np.dtype("<i2"), 2), "float32": (np.dtype("<f4"), 4)}
#: the rate the model reads
MODEL_SAMPLE_RATE = 16000
#: default largest message (bytes): 1 MiB = 16 s of 16 kHz float32 audio (4 bytes a sample), 32 s of int16
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
#: default ``--max-rate``: the fastest pace (audio seconds per wall second) a client may declare
DEFAULT_MAX_RATE = 10.0
#: largest magnitude of a float32 sample (2.0 = 6 dB over full scale, room for a resampler's overshoot);
#: more, or NaN/Inf, is refused (4400)
MAX_FLOAT_SAMPLE = 2.0

CLOSE_NORMAL = 1000
CLOSE_TOO_BIG = 1009  # RFC 6455 "message too big" (sent by the websockets library itself)
CLOSE_SERVER_FULL = 1013  # RFC 6455 "try again later"
CLOSE_INTERNAL_ERROR = 1011
CLOSE_BAD_MESSAGE = 4400
CLOSE_UNAUTHORIZED = 4401
CLOSE_SLOW_READER = 4408
CLOSE_IDLE = 4410
CLOSE_START_TIMEOUT = 4411
CLOSE_UNSUPPORTED = 4415
CLOSE_TOO_FAST = 4429
#: code -> meaning, as documented in docs/serving.md
CLOSE_CODES = {
    CLOSE_NORMAL: "stream finished (after the summary)",
    CLOSE_TOO_BIG: "a message exceeded --max-message-bytes",
    CLOSE_SERVER_FULL: "server full (--max-clients streams already open)",
    CLOSE_INTERNAL_ERROR: "the translator failed on this stream (logged by the server)",
    CLOSE_BAD_MESSAGE: "malformed JSON, unknown message type, audio before start, a partial sample, or "
                       "non-finite or out-of-range audio",
    CLOSE_UNAUTHORIZED: "missing or wrong token",
    CLOSE_SLOW_READER: "the client did not read its events (send queue full)",
    CLOSE_IDLE: "no audio for --idle-timeout-s seconds",
    CLOSE_START_TIMEOUT: "no start message within --start-timeout-s seconds",
    CLOSE_UNSUPPORTED: "unsupported sample rate, sample format, language or rate",
    CLOSE_TOO_FAST: "audio more than --max-ahead-s seconds ahead of the declared rate",
}


class ProtocolError(Exception):
    """A client broke the protocol; the connection is closed with ``code`` and ``reason``.

    Args:
        code: WebSocket close code (:data:`CLOSE_CODES`).
        reason: one line for the client (at most 123 bytes are sent, the WebSocket limit).
    """

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class StartRequest:
    """A validated ``start`` message: target languages, input rate (Hz), sample format and the declared
    pace (audio seconds per wall-clock second; 1 = real time)."""

    langs: tuple[str, ...]
    sample_rate: int
    sample_format: str
    rate: float = 1.0


def parse_text(text: str) -> dict:
    """Parse a JSON text message into a dict with a string ``type``.

    Raises:
        ProtocolError: not JSON, not an object, or no string ``type`` (close code 4400).
    """
    try:
        msg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProtocolError(CLOSE_BAD_MESSAGE, f"malformed JSON: {e.msg}") from None
    except (ValueError, RecursionError):  # a number of more than 4300 digits, nesting too deep
        raise ProtocolError(CLOSE_BAD_MESSAGE, "malformed JSON: a number too long or nesting too deep") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError(CLOSE_BAD_MESSAGE, 'a message must be a JSON object with a string "type"')
    return msg


def parse_start(msg: dict, server_langs: list[str], max_rate: float = DEFAULT_MAX_RATE) -> StartRequest:
    """Validate a ``start`` message against the server's languages and ``--max-rate``.

    Types are checked before values, so any JSON value in any field gives a :class:`ProtocolError`.

    Raises:
        ProtocolError: a field of the wrong type (4400); an unsupported sample rate, sample format,
            language or a declared ``rate`` outside ``(0, max_rate]`` (4415).
    """
    langs = msg.get("langs", list(server_langs))
    if isinstance(langs, str):
        langs = [x for x in langs.split(",") if x]
    if not isinstance(langs, list) or not langs or not all(isinstance(x, str) for x in langs):
        raise ProtocolError(CLOSE_BAD_MESSAGE, 'start: "langs" must be a non-empty list of language codes')
    bad = [x for x in langs if x not in server_langs]
    if bad:
        raise ProtocolError(CLOSE_UNSUPPORTED, f"start: language(s) {','.join(bad)[:40]} not served "
                                               f"(served: {','.join(server_langs)[:40]})")
    rate = msg.get("sample_rate", MODEL_SAMPLE_RATE)
    if isinstance(rate, bool) or not isinstance(rate, int):
        raise ProtocolError(CLOSE_BAD_MESSAGE, 'start: "sample_rate" must be an integer (Hz)')
    if rate not in SUPPORTED_SAMPLE_RATES:
        raise ProtocolError(CLOSE_UNSUPPORTED, f"start: sample_rate {rate} not supported "
                                               f"(supported: {','.join(map(str, SUPPORTED_SAMPLE_RATES))})")
    fmt = msg.get("sample_format", "int16")
    if not isinstance(fmt, str):
        raise ProtocolError(CLOSE_BAD_MESSAGE, 'start: "sample_format" must be a string')
    if fmt not in SAMPLE_FORMATS:
        raise ProtocolError(CLOSE_UNSUPPORTED, f"start: sample_format {fmt[:20]!r} not supported "
                                               f"(supported: {', '.join(SAMPLE_FORMATS)})")
    pace = msg.get("rate", 1)
    if isinstance(pace, bool) or not isinstance(pace, (int, float)):
        raise ProtocolError(CLOSE_BAD_MESSAGE, 'start: "rate" must be a number (audio seconds per second)')
    if not 0 < pace <= max_rate:  # also refuses NaN
        raise ProtocolError(CLOSE_UNSUPPORTED, f"start: rate {str(pace)[:20]} outside (0, {max_rate:g}] "
                                               "(--max-rate)")
    return StartRequest(tuple(dict.fromkeys(langs)), rate, fmt, float(pace))


def decode_audio(data: bytes, sample_format: str) -> np.ndarray:
    """Binary message -> float32 samples ``(n,)`` in [-1, 1] (int16 is divided by 32768).

    Raises:
        ProtocolError: a byte count that is not a whole number of samples; a float32 sample that is NaN,
            infinite or of magnitude above :data:`MAX_FLOAT_SAMPLE` (4400, the reason names the first
            such sample's index).
    """
    dtype, width = SAMPLE_FORMATS[sample_format]
    if len(data) % width:
        raise ProtocolError(CLOSE_BAD_MESSAGE, f"audio frame of {len(data)} bytes is not a whole number of "
                                               f"{sample_format} samples ({width} bytes each)")
    x = np.frombuffer(data, dtype=dtype)
    if sample_format == "int16":
        return x.astype(np.float32) / np.float32(32768.0)
    x = x.astype(np.float32)
    bad = ~(np.abs(x) <= MAX_FLOAT_SAMPLE)  # also NaN
    if bad.any():
        i = int(np.argmax(bad))
        what = "not finite" if not np.isfinite(x[i]) else f"outside [-{MAX_FLOAT_SAMPLE:g}, {MAX_FLOAT_SAMPLE:g}]"
        raise ProtocolError(CLOSE_BAD_MESSAGE, f"audio frame: float32 sample {i} is {what} ({str(x[i])[:12]})")
    return x


def clip_reason(reason: str) -> str:
    """A close reason cut to the 123 UTF-8 bytes a WebSocket close frame allows."""
    b = reason.encode("utf-8")[:123]
    return b.decode("utf-8", errors="ignore")


def word_event(lang: str, text: str, segment: int, start_ms: float, emit_ms: float) -> dict:
    """The ``word`` event (times in ms, rounded to 0.1 ms)."""
    return {"type": "word", "lang": lang, "text": text, "segment": int(segment),
            "start_ms": round(float(start_ms), 1), "emit_ms": round(float(emit_ms), 1)}


def segment_end_event(segment: int, start_ms: float, end_ms: float) -> dict:
    """The ``segment_end`` event (source times in ms)."""
    return {"type": "segment_end", "segment": int(segment), "start_ms": round(float(start_ms), 1),
            "end_ms": round(float(end_ms), 1)}
