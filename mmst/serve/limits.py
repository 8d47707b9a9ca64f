"""The limits of one mmst-serve connection, apart from any I/O: its pace (a token bucket), what counts as
audio for the idle timeout, the read buffer its socket may hold, the key its address is counted under,
and a log that a client cannot flood.

Pace (``--max-ahead-s`` B seconds, the declared ``rate`` r): a token bucket of B audio seconds, full at
``start``, refilled at r seconds per wall-clock second and never above B; a frame of d seconds takes d.
A frame that finds fewer than d seconds in the bucket is refused (close 4429). So in any interval of
T seconds a stream is accepted at most ``B + r * T`` seconds of audio, whatever it did before: credit
saved while silent is capped at B (without the cap, a client that waited an hour at rate 10 could send
36,000 s at once). "Ahead" is ``B - tokens``: 0 on pace or behind, B at the limit. Every frame takes
at least :data:`MIN_FRAME_MS` (empty and one-sample frames too), so the messages a stream may send are
bounded as well: at most ``(B + r * T) / MIN_FRAME_MS`` in T seconds (each costs the event loop the
same whatever it carries).

Idle: only audio counts. A frame resets the idle clock once the audio received since the last reset
adds up to :data:`IDLE_MIN_AUDIO_MS`, so empty frames, or a trickle of one-sample frames, do not keep a
stream open.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

#: the least audio (ms) a frame takes from the pace, however little it carries (one fbank frame shift)
MIN_FRAME_MS = 10.0
#: audio (ms) that must arrive to reset a stream's idle clock (two 10 ms fbank frames)
IDLE_MIN_AUDIO_MS = 20.0
#: default bytes a connection's received-but-unread WebSocket messages may hold
DEFAULT_READ_BUFFER_BYTES = 4 << 20
#: default seconds a tick may compute (or wait for a compute thread) before ``/healthz`` reports a stall
DEFAULT_STALL_TIMEOUT_S = 30.0
#: default prefix length under which IPv6 clients are counted as one address (a /64 is one site)
DEFAULT_IPV6_PREFIX = 64


class PaceBucket:
    """The token bucket of a stream's pace (see the module docstring).

    Args:
        rate: refill, audio seconds per wall-clock second (the declared ``rate``; > 0).
        burst_s: capacity B, audio seconds (``--max-ahead-s``; > 0).
        now: clock time (s) of ``start``; the bucket is full then.
    """

    def __init__(self, rate: float, burst_s: float, now: float) -> None:
        self.rate, self.burst_s = float(rate), float(burst_s)
        self.tokens = self.burst_s
        self.t = float(now)

    def _refill(self, now: float) -> None:
        if now > self.t:
            self.tokens = min(self.burst_s, self.tokens + self.rate * (now - self.t))
            self.t = now

    def ahead_s(self, now: float) -> float:
        """Seconds of audio the stream is ahead of its pace at ``now`` (0 ... B)."""
        self._refill(now)
        return self.burst_s - self.tokens

    def charge(self, audio_s: float, now: float) -> float:
        """Take ``audio_s`` seconds for a frame received at ``now``; returns how far ahead the stream is
        with it (s). When that exceeds B nothing is taken (the caller refuses the frame)."""
        self._refill(now)
        ahead = self.burst_s - self.tokens + audio_s
        if ahead <= self.burst_s + 1e-9:
            self.tokens -= audio_s
        return ahead


def max_queue_frames(max_message_bytes: int, read_buffer_bytes: int = DEFAULT_READ_BUFFER_BYTES) -> int:
    """The websockets ``max_queue`` (frames received and not yet read, above which the server stops
    reading the socket) that keeps a connection's unread messages within ``read_buffer_bytes``: at least
    1, else ``read_buffer_bytes // max_message_bytes``. A connection then holds at most
    ``(max_queue + 1) * max_message_bytes`` of input (the queue plus the message being received)."""
    return max(1, int(read_buffer_bytes) // max(1, int(max_message_bytes)))


def address_key(address: str, ipv6_prefix: int = DEFAULT_IPV6_PREFIX) -> str:
    """The key a client address is counted under for ``--max-clients-per-ip``: an IPv4 address itself
    (also written IPv4-mapped, ``::ffff:a.b.c.d``); an IPv6 address as its ``/ipv6_prefix`` network
    (one site gets a /64, so counting single addresses would let it open unlimited streams); anything
    that is not an address (a hostname from a proxy), as given."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, ipv6_prefix), strict=False))
    return str(ip)


class RateLimitedLog(logging.Filter):
    """At most ``burst`` log lines per ``window_s`` seconds (a client cannot flood the log); the count of
    lines dropped is added to the next line that passes. Call :meth:`log`, or add it as a filter to a
    logger that other code writes to (:meth:`filter`).

    Args:
        logger: where :meth:`log` writes.
        burst: lines allowed per window.
        window_s: window length (s).
        clock: monotonic clock (s).
    """

    def __init__(self, logger: logging.Logger, burst: int = 20, window_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.logger, self.burst, self.window_s, self.clock = logger, int(burst), float(window_s), clock
        self._start = -float("inf")
        self._n = 0
        self.dropped = 0
        self._lock = threading.Lock()

    def _admit(self) -> tuple[bool, int]:
        """(this line may be logged, lines dropped before it)."""
        with self._lock:
            now = self.clock()
            if now - self._start >= self.window_s:
                self._start, self._n = now, 0
            if self._n >= self.burst:
                self.dropped += 1
                return False, 0
            self._n += 1
            dropped, self.dropped = self.dropped, 0
        return True, dropped

    def log(self, level: int, msg: str, *args: Any, exc_info: Any = None) -> bool:
        """Log ``msg % args`` at ``level`` unless this window's lines are used up; True when logged."""
        ok, dropped = self._admit()
        if ok:
            if dropped:
                msg += f" ({dropped} similar line(s) not logged)"
            self.logger.log(level, msg, *args, exc_info=exc_info)
        return ok

    def filter(self, record: logging.LogRecord) -> bool:
        """As a logging filter: records at WARNING and above share the budget of :meth:`log`."""
        if record.levelno < logging.WARNING:
            return True
        ok, dropped = self._admit()
        if ok and dropped:
            record.msg = f"{record.msg} ({dropped} similar line(s) not logged)"
        return ok
