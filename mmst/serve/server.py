"""The mmst-serve process: one WebSocket endpoint (``/ws``) and the web page (``/``), many streams.

Built on the ``websockets`` library (asyncio): it is small, has no framework around it, and answers
plain HTTP GETs from the same handshake hook (``process_request``), so one port serves both the page
and the API without an ASGI stack (FastAPI + uvicorn would add two dependencies for four static
files). Its limits (``max_size``, ``write_limit``, ping timeouts) and RFC 6455 close codes are the
server's defences against bad clients.

Each connection gets its own :class:`~mmst.serve.session.StreamSession` (its own long-form driver);
the model is shared read-only; compute runs on the :class:`~mmst.serve.batching.TickScheduler`'s
thread. Faults close ONE connection with a code and a reason (:mod:`mmst.serve.protocol`), never the
server: malformed or unknown messages (any JSON value in any field), audio before ``start``, partial
samples, unsupported rates, oversized messages, a full server (``max_clients``), too many streams from
one address (``max_clients_per_ip``), a wrong token, a slow reader (bounded send queue), a client
sending faster than its declared pace (``max_ahead_s``), non-finite or out-of-range audio, a client
that sends no ``start`` (``start_timeout_s``) or no audio (``idle_timeout_s``), a translator error.
Every warning and error line goes through one rate limiter (:class:`~mmst.serve.limits.RateLimitedLog`);
client errors are logged on one line each, never with a traceback. A connection's unread input is
bounded (``max_queue`` from ``max_message_bytes`` and ``read_buffer_bytes``), and a connection closed
for a fault frees its stream, slot and address count before the closing handshake.

On an open network: WebSocket handshakes from a browser page of another origin are refused (403)
unless the origin is allowed (``allow_origins``; the server's own origins always are, on a server
listening on every interface also the origin of the ``Host`` the request was sent to, and clients that
send no ``Origin``, i.e. programs, too); ``token`` guards the WebSocket, ``/stats.json`` and
``/config.json`` (``Authorization: Bearer``, the WebSocket subprotocol ``mmst.bearer.<base64url>``
that the page uses, or ``?token=``); ``GET /healthz`` (no token) says whether the scheduling loop runs
and the compute threads finish their ticks.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import ipaddress
import itertools
import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from mmst.simultaneous.longform import pooled_untranslated_share

from .batching import (
    DEFAULT_MAX_STEP_SAMPLES,
    DEFAULT_MIN_GROUP,
    DEFAULT_TICK_MS,
    DEFAULT_TICK_STREAMS,
    TickScheduler,
)
from .limits import (
    DEFAULT_IPV6_PREFIX,
    DEFAULT_READ_BUFFER_BYTES,
    DEFAULT_STALL_TIMEOUT_S,
    MIN_FRAME_MS,
    RateLimitedLog,
    address_key,
    max_queue_frames,
)
from .protocol import (
    CLOSE_BAD_MESSAGE,
    CLOSE_IDLE,
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    CLOSE_SERVER_FULL,
    CLOSE_SLOW_READER,
    CLOSE_START_TIMEOUT,
    CLOSE_TOO_FAST,
    CLOSE_UNAUTHORIZED,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_RATE,
    SAMPLE_FORMATS,
    SUPPORTED_SAMPLE_RATES,
    ProtocolError,
    clip_reason,
    decode_audio,
    parse_start,
    parse_text,
)
from .session import StreamSession

logger = logging.getLogger("mmst.serve")

STATIC_DIR = Path(__file__).resolve().parent / "static"
#: files the page is made of: URL path -> (file, content type)
STATIC_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/capture-worklet.js": ("capture-worklet.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
#: the page may load and connect only to its own origin (no CDN, no external request)
CSP = "default-src 'self'; connect-src 'self' ws: wss:; media-src 'self' blob:; img-src 'self' data:"

#: the WebSocket subprotocol the server speaks; a client that offers it may also offer
#: ``mmst.bearer.<token, base64url>`` to send the token (a browser cannot set the Authorization header)
SUBPROTOCOL = "mmst"
TOKEN_SUBPROTOCOL_PREFIX = "mmst.bearer."
#: how often (s) the start and idle deadlines of the open connections are checked
WATCH_INTERVAL_S = 0.1

_END = object()  # send queue: summary, then close
_STREAM_COUNTER = itertools.count(1)  # stream ids: unique within a process, time-stamped across processes


def new_stream_id() -> str:
    """A stream id unique across server runs: UTC time stamp (ms) + a process-wide counter, e.g.
    ``20261201-101502.123-000007`` (also the ``--save-audio`` file name)."""
    t = time.time()
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}-{next(_STREAM_COUNTER):06d}"


@dataclass
class ServerConfig:
    """Server settings (the ``mmst-serve`` options of the same names).

    Attributes:
        langs: languages the server decodes (a client may ask for a subset).
        max_clients: concurrent streams; more are refused with close code 1013.
        token: shared secret; when set, a client must send it (``Authorization: Bearer``, the
            subprotocol ``mmst.bearer.<base64url>``, or ``?token=``), else close code 4401.
        max_message_bytes: largest WebSocket message (close code 1009 above).
        send_queue: events waiting for one client; a client that lets it fill is a slow reader (4408).
        start_timeout_s: the ``start`` message must arrive within this time after the handshake (4411).
        save_audio_dir: write each stream's received 16 kHz PCM to ``DIR/<stream id>.wav``, as it is
            computed (``.wav.part`` until the stream closes).
        batching: ``"tick"`` or ``"off"`` (:mod:`mmst.serve.batching`).
        max_ahead_s: seconds of audio a stream may be ahead of its declared pace (``rate`` times the
            wall-clock time since its ``start``); more closes it with 4429.
        max_rate: the fastest pace a client may declare in ``start`` (audio seconds per second).
        idle_timeout_s: a stream that sends no audio for this long (before its ``end``) is closed (4410);
            frames count once :data:`~mmst.serve.limits.IDLE_MIN_AUDIO_MS` of audio has come.
        max_clients_per_ip: streams open at once from one address (loopback addresses exempt); more are
            refused with 1013.
        ipv6_prefix: IPv6 clients are counted per network of this prefix length (64: a site; 128: each
            address).
        read_buffer_bytes: received messages a connection may hold unread; websockets' ``max_queue`` is
            ``max(1, read_buffer_bytes // max_message_bytes)`` messages.
        stall_timeout_s: ``/healthz`` answers 503 when a tick has been running (or waiting for a
            compute thread) this long.
        trusted_proxy: address of a reverse proxy whose ``X-Forwarded-For`` names the client (its last
            entry); other peers' headers are ignored.
        allow_origins: browser origins (``https://host[:port]``) allowed besides the server's own.
        max_step_samples: most audio (16 kHz samples) one step of a stream computes.
        compute_workers: compute threads (streams of a tick split over them); None = one per two CPU cores
            (:func:`~mmst.serve.batching.default_workers`).
        tick_ms: shortest interval between the starts of two ticks (tick batching; 0 = no wait), unless
            ``tick_streams`` streams have audio waiting before it is over.
        tick_streams: streams with audio waiting that start a tick before ``tick_ms`` is over.
        worker_min_streams: fewest streams per compute thread when a tick is split over them.
    """

    langs: list[str]
    max_clients: int = 8
    token: str | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    send_queue: int = 256
    start_timeout_s: float = 10.0
    save_audio_dir: Path | None = None
    batching: str = "tick"
    max_ahead_s: float = 10.0
    max_rate: float = DEFAULT_MAX_RATE
    idle_timeout_s: float = 30.0
    max_clients_per_ip: int = 4
    ipv6_prefix: int = DEFAULT_IPV6_PREFIX
    read_buffer_bytes: int = DEFAULT_READ_BUFFER_BYTES
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    trusted_proxy: str | None = None
    allow_origins: list[str] = field(default_factory=list)
    max_step_samples: int = DEFAULT_MAX_STEP_SAMPLES
    compute_workers: int | None = None
    tick_ms: float = DEFAULT_TICK_MS
    tick_streams: int = DEFAULT_TICK_STREAMS
    worker_min_streams: int = DEFAULT_MIN_GROUP
    info: dict = field(default_factory=dict)


class _Client:
    """One open connection: its session, send queue and sender task."""

    def __init__(self, ws: ServerConnection, send_queue: int, stream_id: str, address: str, t_open: float) -> None:
        self.ws = ws
        self.stream_id = stream_id
        self.address = address  # the client's address (X-Forwarded-For behind the trusted proxy)
        self.limit_key: str | None = None  # the key counted for --max-clients-per-ip (None: exempt)
        self.t_open = t_open  # clock time of the handshake: the start deadline counts from it
        self.started = False  # a valid start message arrived
        self.dropped = False
        self.session: StreamSession | None = None
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=send_queue)
        self.sender: asyncio.Task | None = None
        self.closing = False
        self.end_queued = False


class TranslationServer:
    """The WebSocket + page server (see the module docstring).

    Args:
        make_driver: ``make_driver(langs: list[str]) -> long-form driver`` for a new stream (called
            off the event loop); when it has ``release(driver)`` (a :class:`~mmst.serve.drivers.DriverPool`),
            a closed stream's driver is handed back to it on the compute thread.
        config: :class:`ServerConfig`.
        clock: monotonic clock in seconds.
    """

    def __init__(self, make_driver: Callable[[list[str]], Any], config: ServerConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.make_driver = make_driver
        self.config = config
        self.clock = clock
        self.clients: set[_Client] = set()
        self._by_session: dict[StreamSession, _Client] = {}
        self.scheduler: TickScheduler | None = None
        self.n_connections = 0
        self.refused = 0
        self._per_ip: dict[str, int] = {}
        self._origins: set[str] = {_norm_origin(o) for o in config.allow_origins}
        self._any_host = False  # listening on every interface: the request's Host is an own origin
        self.client_log = RateLimitedLog(logger)
        self.watch_s = WATCH_INTERVAL_S

    # ------------------------------------------------------------------ lifecycle
    @contextlib.asynccontextmanager
    async def running(self, host: str = "127.0.0.1", port: int = 8765):
        """Serve on ``host:port`` inside the ``async with`` block; yields the websockets ``Server``
        (``server.sockets[0].getsockname()[1]`` is the port when 0 was asked)."""
        self.scheduler = TickScheduler(self._deliver, self.config.batching, self.config.max_step_samples,
                                       workers=self.config.compute_workers, tick_ms=self.config.tick_ms,
                                       tick_streams=self.config.tick_streams,
                                       min_group=self.config.worker_min_streams,
                                       health_clock=self.clock, log=self.client_log)
        self.scheduler.start()
        self._any_host = host in ("", "0.0.0.0", "::")
        # warnings of the libraries a client can trigger (a stacked call retried, a failed handshake)
        # share the rate limit of the server's own lines
        limited = [logging.getLogger(n) for n in ("mmst.models.stacked", "websockets.server")]
        for lg in limited:
            lg.addFilter(self.client_log)
        watch = asyncio.get_running_loop().create_task(self._watch(), name="mmst-deadlines")
        try:
            async with serve(self._handler, host, port, process_request=self._process_request,
                             max_size=self.config.max_message_bytes, compression=None,
                             max_queue=max_queue_frames(self.config.max_message_bytes, self.config.read_buffer_bytes),
                             select_subprotocol=_select_subprotocol) as server:
                self._origins |= own_origins(host, server.sockets[0].getsockname()[1])
                yield server
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            for lg in limited:
                lg.removeFilter(self.client_log)
            await self.scheduler.stop()

    # ------------------------------------------------------------------ HTTP
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if path == "/ws":
            origin = request.headers.get("Origin")
            if origin is not None and not self._origin_allowed(origin, request):
                self.refused += 1
                self.client_log.log(logging.WARNING, "refused a WebSocket handshake from origin %r (peer %s); "
                                    "allow it with --allow-origin", origin[:100], _peer(connection))
                return _response(HTTPStatus.FORBIDDEN, b"origin not allowed (mmst-serve --allow-origin)\n",
                                 "text/plain; charset=utf-8")
            return None  # WebSocket handshake
        if path == "/healthz":
            h = self.scheduler.health(self.config.stall_timeout_s) if self.scheduler else {"loop": "not started"}
            body = {"loop": h["loop"], "errors": h.get("errors", 0), "streams": len(self.clients),
                    "tick_running_s": h.get("tick_running_s")}
            return _response(HTTPStatus.OK if h["loop"] == "running" else HTTPStatus.SERVICE_UNAVAILABLE,
                             json.dumps(body).encode(), "application/json")
        if path in ("/config.json", "/stats.json") and not self._authorized(request):
            return _response(HTTPStatus.UNAUTHORIZED, b"missing or wrong token (Authorization: Bearer, or ?token=)\n",
                             "text/plain; charset=utf-8")
        if path == "/config.json":
            from mmst.simultaneous.detok import CHAR_LANGS

            body = json.dumps({"langs": self.config.langs, "char_langs": [x for x in self.config.langs if x in CHAR_LANGS],
                               "sample_rates": list(SUPPORTED_SAMPLE_RATES),
                               "sample_formats": list(SAMPLE_FORMATS), "token_required": bool(self.config.token),
                               "max_rate": self.config.max_rate, "max_ahead_s": self.config.max_ahead_s,
                               **self.config.info}).encode()
            return _response(HTTPStatus.OK, body, "application/json")
        if path == "/stats.json":
            return _response(HTTPStatus.OK, json.dumps(self.stats()).encode(), "application/json")
        if path in STATIC_FILES:
            name, ctype = STATIC_FILES[path]
            return _response(HTTPStatus.OK, (STATIC_DIR / name).read_bytes(), ctype)
        return _response(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

    def _origin_allowed(self, origin: str, request: Request) -> bool:
        """``origin`` is allowed: one of the server's own or ``allow_origins``, or, on a server listening
        on every interface, the ``http(s)://`` origin of the ``Host`` the request was sent to (its own
        page opened by any of the machine's addresses or names)."""
        o = _norm_origin(origin)
        if o in self._origins:
            return True
        host = (request.headers.get("Host") or "").strip().lower()
        return self._any_host and bool(host) and o in (_norm_origin(f"http://{host}"), _norm_origin(f"https://{host}"))

    def stats(self) -> dict:
        """Open streams, connections so far, refusals, scheduler ticks/steps and compute seconds; in tick
        mode, ``stacked``: per kind of model call (``VadWindows``, ``EncoderBlock``, ``DecoderStep``) the
        calls made and the stream requests they served (requests / calls = mean streams per call);
        ``untranslated_speech_share`` per language over the open streams' closed segments (docs/longform.md)."""
        s = self.scheduler
        drivers = [c.session.driver for c in self.clients if c.session is not None]
        return {"streams": len(self.clients), "connections": self.n_connections, "refused": self.refused,
                "untranslated_speech_share": pooled_untranslated_share(drivers),
                "health": s.health(self.config.stall_timeout_s) if s else {"loop": "not started"},
                "ticks": s.ticks if s else 0, "steps": s.steps if s else 0,
                "compute_s": round(s.busy_s, 3) if s else 0.0, "batching": self.config.batching,
                "compute_workers": s.workers if s else None,
                "stacked": {kind: {"calls": c, "requests": r} for kind, (c, r) in s.stack.by_kind.items()} if s else {}}

    # ------------------------------------------------------------------ WebSocket
    def _authorized(self, req: Request | None) -> bool:
        """The request carries the token, or none is set. Looked for in ``Authorization: Bearer``, then
        the subprotocol ``mmst.bearer.<base64url>``, then the URL's ``?token=`` (kept for old clients:
        proxies log URLs)."""
        if not self.config.token:
            return True
        given = _request_token(req) if req is not None else ""
        return hmac.compare_digest(given.encode(), self.config.token.encode())

    def client_address(self, ws: ServerConnection) -> str:
        """The peer's address, or the last ``X-Forwarded-For`` entry when the peer is the trusted proxy."""
        peer = _peer(ws)
        if self.config.trusted_proxy and peer == self.config.trusted_proxy and ws.request is not None:
            fwd = ws.request.headers.get("X-Forwarded-For", "")
            last = fwd.split(",")[-1].strip()
            if last:
                return last[:100]
        return peer

    async def _handler(self, ws: ServerConnection) -> None:
        self.n_connections += 1
        address = self.client_address(ws)
        if not self._authorized(ws.request):
            self.refused += 1
            self.client_log.log(logging.INFO, "%s: refused: missing or wrong token", address)
            await ws.close(CLOSE_UNAUTHORIZED, "unauthorized: missing or wrong token")
            return
        if len(self.clients) >= self.config.max_clients:
            self.refused += 1
            self.client_log.log(logging.INFO, "%s: refused: server full", address)
            await ws.close(CLOSE_SERVER_FULL, clip_reason(
                f"server full: {len(self.clients)} streams open (--max-clients {self.config.max_clients}); "
                "try again later"))
            return
        key = None if _is_loopback(address) else address_key(address, self.config.ipv6_prefix)
        if key is not None and self._per_ip.get(key, 0) >= self.config.max_clients_per_ip:
            self.refused += 1
            self.client_log.log(logging.INFO, "%s: refused: too many streams from this address (%s)", address, key)
            await ws.close(CLOSE_SERVER_FULL, clip_reason(
                f"{self._per_ip[key]} streams already open from your address "
                f"(--max-clients-per-ip {self.config.max_clients_per_ip}); try again later"))
            return
        client = _Client(ws, self.config.send_queue, new_stream_id(), address, self.clock())
        self.clients.add(client)
        if key is not None:
            client.limit_key = key
            self._per_ip[key] = self._per_ip.get(key, 0) + 1
        try:
            await self._serve_client(client)
        except ProtocolError as e:
            self.client_log.log(logging.INFO, "%s: closed (%d): %s", client.stream_id, e.code, e.reason)
            client.closing = True
            await self._drop(client)  # free the stream, its slot and address count before the handshake
            closing = asyncio.get_running_loop().create_task(self._close(client, e.code, e.reason))
            await self._discard_until_closed(client)
            await closing
        except ConnectionClosed:
            pass
        except Exception:  # noqa: BLE001 - e.g. a driver that cannot be built: this stream only
            self.client_log.log(logging.ERROR, "%s: internal error", client.stream_id, exc_info=True)
            await self._close(client, CLOSE_INTERNAL_ERROR, "internal server error (logged)")
        finally:
            await self._drop(client)

    async def _serve_client(self, client: _Client) -> None:
        ws = client.ws
        first = await ws.recv()  # the start deadline is kept by _watch
        if client.closing:
            return
        if isinstance(first, bytes):
            raise ProtocolError(CLOSE_BAD_MESSAGE, "audio before the start message")
        msg = parse_text(first)
        if msg["type"] != "start":
            raise ProtocolError(CLOSE_BAD_MESSAGE, f"expected a start message, got type {msg['type'][:30]!r}")
        req = parse_start(msg, self.config.langs, self.config.max_rate)
        client.started = True
        driver = await asyncio.get_running_loop().run_in_executor(None, self.make_driver, list(req.langs))
        save = (self.config.save_audio_dir / f"{client.stream_id}.wav") if self.config.save_audio_dir else None
        session = StreamSession(driver, req, save_path=save, clock=self.clock, max_ahead_s=self.config.max_ahead_s)
        client.session = session
        if client.closing:  # closed while the driver was built
            return
        self._by_session[session] = client
        client.sender = asyncio.get_running_loop().create_task(self._sender(client))
        await ws.send(json.dumps({"type": "ready", "stream": client.stream_id, "langs": list(req.langs),
                                  "sample_rate": req.sample_rate, "sample_format": req.sample_format,
                                  "rate": req.rate, "max_ahead_s": self.config.max_ahead_s}))
        self.scheduler.add(session)
        while True:
            try:
                message = await ws.recv()  # the idle deadline is kept by _watch
            except ConnectionClosed:
                return  # closed by the sender after the summary, or by the client: _drop frees it
            if client.closing:
                await self._discard_until_closed(client)
                return
            if isinstance(message, bytes):
                self.accept_audio(session, message)
                await self.scheduler.notify(session)
                continue
            msg = parse_text(message)
            if msg["type"] == "end":
                if not session.ended:
                    session.end()
                    await self.scheduler.notify(session)
            elif msg["type"] == "start":
                raise ProtocolError(CLOSE_BAD_MESSAGE, "start sent twice")
            else:
                raise ProtocolError(CLOSE_BAD_MESSAGE, f"unknown message type {msg['type'][:40]!r}")

    async def _discard_until_closed(self, client: _Client) -> None:
        """Read and drop what a connection being closed still sends, until the peer's close frame (or
        websockets' close timeout): nothing of it is kept, and the closing handshake can complete (a
        connection whose unread messages reached ``max_queue`` would no longer be read at all)."""
        with contextlib.suppress(ConnectionClosed):
            while True:
                await client.ws.recv()

    def accept_audio(self, session: StreamSession, message: bytes, now: float | None = None) -> None:
        """Queue a binary message of a started stream, received at ``now`` (default: the clock).

        Raises:
            ProtocolError: audio after ``end``, a partial sample, non-finite or out-of-range samples
                (4400); more than ``--max-ahead-s`` seconds ahead of the stream's pace, each frame
                counted as at least :data:`~mmst.serve.limits.MIN_FRAME_MS` (4429).
        """
        req = session.request
        if session.ended:
            raise ProtocolError(CLOSE_BAD_MESSAGE, "audio after the end message")
        x = decode_audio(message, req.sample_format)
        now = self.clock() if now is None else now
        ahead = session.pace.charge(max(x.size / req.sample_rate, MIN_FRAME_MS / 1000.0), now)
        if ahead > self.config.max_ahead_s + 1e-9:
            raise ProtocolError(CLOSE_TOO_FAST, f"too fast: audio {ahead:.2f} s ahead of {req.rate:g}x real "
                                                f"time (--max-ahead-s {self.config.max_ahead_s:g})")
        session.add_audio(x, recv_time=now)

    async def _watch(self) -> None:
        """Every :attr:`watch_s` seconds: close the connections past their start deadline (4411) or idle
        (no audio for ``idle_timeout_s`` before ``end``, 4410), by the server's clock."""
        while True:
            await asyncio.sleep(self.watch_s)
            now = self.clock()
            for c in list(self.clients):
                if c.closing:
                    continue
                s = c.session
                if not c.started and now - c.t_open > self.config.start_timeout_s:
                    self._close_soon(c, CLOSE_START_TIMEOUT, f"no start message within "
                                     f"{self.config.start_timeout_s:g} s (--start-timeout-s)")
                elif s is not None and not s.ended and now - s.last_audio_t > self.config.idle_timeout_s:
                    self._close_soon(c, CLOSE_IDLE, f"idle: no audio for {self.config.idle_timeout_s:g} s "
                                     "(--idle-timeout-s)")

    def _deliver(self, session: StreamSession, events: list, error: BaseException | None) -> None:
        """Scheduler callback (event loop): queue a step's events; close on error or a full queue."""
        client = self._by_session.get(session)
        if client is None or client.closing:
            return
        if error is not None:
            self.client_log.log(logging.ERROR, "%s: translation failed: %s: %s", client.stream_id,
                                type(error).__name__, str(error)[:200])
            logger.debug("%s: traceback", client.stream_id, exc_info=error)
            self._close_soon(client, CLOSE_INTERNAL_ERROR, f"translation failed: {type(error).__name__}", log=False)
            return
        try:
            for ev in events:
                client.queue.put_nowait(ev)
            if session.finished and not client.end_queued:
                client.end_queued = True
                client.queue.put_nowait(_END)
        except asyncio.QueueFull:
            self._close_soon(client, CLOSE_SLOW_READER,
                             f"slow reader: {self.config.send_queue} events not read; disconnected")

    async def _sender(self, client: _Client) -> None:
        ws, session = client.ws, client.session
        while True:
            ev = await client.queue.get()
            if ev is _END:
                await ws.send(json.dumps(session.summary()))
                await self._close(client, CLOSE_NORMAL, "stream finished")
                return
            recv_t = ev.pop("_recv_t", None)
            now = self.clock()
            if ev.get("type") == "word":
                ev["emit_ms"] = round((now - (session.t0 if session.t0 is not None else now)) * 1000.0, 1)
                if recv_t is not None:
                    added = (now - recv_t) * 1000.0
                    ev["added_ms"] = round(added, 1)
                    session.latencies_ms.append(added)
            await ws.send(json.dumps(ev, ensure_ascii=False))

    def _close_soon(self, client: _Client, code: int, reason: str, log: bool = True) -> None:
        if client.closing:
            return
        client.closing = True
        if client.session is not None:
            self.scheduler.remove(client.session)
        if log:
            self.client_log.log(logging.INFO, "%s: closing (%d): %s", client.stream_id, code, reason)
        asyncio.get_running_loop().create_task(self._fault_close(client, code, reason))

    async def _fault_close(self, client: _Client, code: int, reason: str) -> None:
        """Free the connection's stream, slot and address count now, then close it (the handshake may
        wait for a client that does not read, up to websockets' close timeout)."""
        await self._drop(client)
        await self._close(client, code, reason)

    async def _close(self, client: _Client, code: int, reason: str) -> None:
        client.closing = True
        with contextlib.suppress(ConnectionClosed):
            await client.ws.close(code, clip_reason(reason))

    async def _drop(self, client: _Client) -> None:
        """Free everything of a connection that ended (normally, by a fault or by disconnecting): its
        slot, its count under its address, its stream. Runs once per connection."""
        if client.dropped:
            return
        client.dropped = True
        client.closing = True
        self.clients.discard(client)
        if client.limit_key is not None:
            n = self._per_ip.get(client.limit_key, 1) - 1
            if n > 0:
                self._per_ip[client.limit_key] = n
            else:
                self._per_ip.pop(client.limit_key, None)
        if client.sender is not None and not client.sender.done():
            client.sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed, Exception):
                await client.sender
        session = client.session
        if session is not None:
            self.scheduler.remove(session)
            self._by_session.pop(session, None)
            if session.save_path is not None:  # on the compute thread, after this stream's last step
                try:
                    await self.scheduler.run(session.close_save)
                except (OSError, RuntimeError) as e:
                    self.client_log.log(logging.WARNING, "%s: cannot save audio: %s", client.stream_id, e)
            else:
                session.take_pending()  # the queued audio is freed now, not when the handshake ends
            release = getattr(self.make_driver, "release", None)
            if release is not None:  # after any step of this driver still running on the compute thread
                await self.scheduler.run(release, session.driver)
            session.driver = None
        client.session = None
        while not client.queue.empty():
            client.queue.get_nowait()


def _response(status: HTTPStatus, body: bytes, content_type: str) -> Response:
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(body))),
                       ("Content-Security-Policy", CSP), ("Cache-Control", "no-store"),
                       ("X-Content-Type-Options", "nosniff")])
    return Response(status.value, status.phrase, headers, body)


def _select_subprotocol(connection: ServerConnection, offered) -> str | None:
    """``mmst`` when the client offers it (a browser that sends its token as a subprotocol needs one
    chosen), else none: programs offer no subprotocol."""
    return SUBPROTOCOL if SUBPROTOCOL in offered else None


def _request_token(req: Request) -> str:
    """The token a handshake or GET carries: ``Authorization: Bearer``, else the subprotocol
    ``mmst.bearer.<base64url>``, else ``?token=``; "" when none."""
    auth = req.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    for header in req.headers.get_all("Sec-WebSocket-Protocol"):
        for proto in header.split(","):
            proto = proto.strip()
            if proto.startswith(TOKEN_SUBPROTOCOL_PREFIX):
                b64 = proto[len(TOKEN_SUBPROTOCOL_PREFIX):]
                try:
                    return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).decode("utf-8")
                except (binascii.Error, UnicodeDecodeError, ValueError):
                    return ""
    return (parse_qs(urlsplit(req.path).query).get("token") or [""])[0]


def _peer(connection: ServerConnection) -> str:
    addr = connection.remote_address
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _norm_origin(origin: str) -> str:
    """``Scheme://host[:port]`` lower-cased, without a trailing slash or the scheme's default port."""
    o = origin.strip().rstrip("/").lower()
    for scheme, port in (("http://", ":80"), ("https://", ":443")):
        if o.startswith(scheme) and o.endswith(port):
            o = o[: -len(port)]
    return o


def own_origins(host: str, port: int) -> set[str]:
    """The origins of the server's own page when it listens on ``host:port``: ``http://NAME:PORT`` for
    the host it was given, ``localhost``, ``127.0.0.1`` and ``[::1]``, and, when it listens on every
    interface, the machine's host name and fully qualified name."""
    names = {"localhost", "127.0.0.1", "[::1]"}
    if host in ("", "0.0.0.0", "::"):
        names |= {socket.gethostname(), socket.getfqdn()}
    elif host:
        names.add(f"[{host}]" if ":" in host else host)
    return {_norm_origin(f"http://{n}:{port}") for n in names if n}
