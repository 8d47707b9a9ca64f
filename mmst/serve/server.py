"""The mmst-serve process: one WebSocket endpoint (``/ws``) and the web page (``/``), many streams.

Built on the ``websockets`` library (asyncio): it is small, has no framework around it, and answers
plain HTTP GETs from the same handshake hook (``process_request``), so one port serves both the page
and the API without an ASGI stack (FastAPI + uvicorn would add two dependencies for four static
files). Its limits (``max_size``, ``write_limit``, ping timeouts) and RFC 6455 close codes are the
server's defences against bad clients.

Each connection gets its own :class:`~mmst.serve.session.StreamSession` (its own long-form driver);
the model is shared read-only; compute runs on the :class:`~mmst.serve.batching.TickScheduler`'s
thread. Faults close ONE connection with a code and a reason (:mod:`mmst.serve.protocol`), never the
server: malformed or unknown messages, audio before ``start``, partial samples, unsupported rates,
oversized messages, a full server (``max_clients``), a wrong token, a slow reader (bounded send
queue), a translator error.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
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

from .batching import TickScheduler
from .protocol import (
    CLOSE_BAD_MESSAGE,
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    CLOSE_SERVER_FULL,
    CLOSE_SLOW_READER,
    CLOSE_UNAUTHORIZED,
    DEFAULT_MAX_MESSAGE_BYTES,
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

_END = object()  # send queue: summary, then close


@dataclass
class ServerConfig:
    """Server settings (the ``mmst-serve`` options of the same names).

    Attributes:
        langs: languages the server decodes (a client may ask for a subset).
        max_clients: concurrent streams; more are refused with close code 1013.
        token: shared secret; when set, a client must send it (``?token=`` or
            ``Authorization: Bearer``), else close code 4401.
        max_message_bytes: largest WebSocket message (close code 1009 above).
        send_queue: events waiting for one client; a client that lets it fill is a slow reader (4408).
        start_timeout_s: the ``start`` message must arrive within this time (4400).
        save_audio_dir: write each stream's received 16 kHz PCM to ``DIR/<stream id>.wav``.
        batching: ``"tick"`` or ``"off"`` (:mod:`mmst.serve.batching`).
    """

    langs: list[str]
    max_clients: int = 8
    token: str | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    send_queue: int = 256
    start_timeout_s: float = 10.0
    save_audio_dir: Path | None = None
    batching: str = "tick"
    info: dict = field(default_factory=dict)


class _Client:
    """One open connection: its session, send queue and sender task."""

    def __init__(self, ws: ServerConnection, send_queue: int, stream_id: str) -> None:
        self.ws = ws
        self.stream_id = stream_id
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

    # ------------------------------------------------------------------ lifecycle
    @contextlib.asynccontextmanager
    async def running(self, host: str = "127.0.0.1", port: int = 8765):
        """Serve on ``host:port`` inside the ``async with`` block; yields the websockets ``Server``
        (``server.sockets[0].getsockname()[1]`` is the port when 0 was asked)."""
        self.scheduler = TickScheduler(self._deliver, self.config.batching)
        self.scheduler.start()
        try:
            async with serve(self._handler, host, port, process_request=self._process_request,
                             max_size=self.config.max_message_bytes, compression=None,
                             max_queue=64) as server:
                yield server
        finally:
            await self.scheduler.stop()

    # ------------------------------------------------------------------ HTTP
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if path == "/ws":
            return None  # WebSocket handshake
        if path == "/config.json":
            from mmst.simultaneous.detok import CHAR_LANGS

            body = json.dumps({"langs": self.config.langs, "char_langs": [x for x in self.config.langs if x in CHAR_LANGS],
                               "sample_rates": list(SUPPORTED_SAMPLE_RATES),
                               "sample_formats": list(SAMPLE_FORMATS), "token_required": bool(self.config.token),
                               **self.config.info}).encode()
            return _response(HTTPStatus.OK, body, "application/json")
        if path == "/stats.json":
            return _response(HTTPStatus.OK, json.dumps(self.stats()).encode(), "application/json")
        if path in STATIC_FILES:
            name, ctype = STATIC_FILES[path]
            return _response(HTTPStatus.OK, (STATIC_DIR / name).read_bytes(), ctype)
        return _response(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

    def stats(self) -> dict:
        """Open streams, connections so far, refusals, scheduler ticks/steps and compute seconds; in tick
        mode, ``stacked``: per kind of model call (``VadWindows``, ``EncoderBlock``, ``DecoderStep``) the
        calls made and the stream requests they served (requests / calls = mean streams per call)."""
        s = self.scheduler
        return {"streams": len(self.clients), "connections": self.n_connections, "refused": self.refused,
                "ticks": s.ticks if s else 0, "steps": s.steps if s else 0,
                "compute_s": round(s.busy_s, 3) if s else 0.0, "batching": self.config.batching,
                "stacked": {kind: {"calls": c, "requests": r} for kind, (c, r) in s.stack.by_kind.items()} if s else {}}

    # ------------------------------------------------------------------ WebSocket
    def _authorized(self, ws: ServerConnection) -> bool:
        if not self.config.token:
            return True
        req = ws.request
        given = (parse_qs(urlsplit(req.path).query).get("token") or [""])[0] if req else ""
        auth = req.headers.get("Authorization", "") if req else ""
        if not given and auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        return hmac.compare_digest(given.encode(), self.config.token.encode())

    async def _handler(self, ws: ServerConnection) -> None:
        self.n_connections += 1
        if not self._authorized(ws):
            self.refused += 1
            await ws.close(CLOSE_UNAUTHORIZED, "unauthorized: missing or wrong token")
            return
        if len(self.clients) >= self.config.max_clients:
            self.refused += 1
            await ws.close(CLOSE_SERVER_FULL, clip_reason(
                f"server full: {len(self.clients)} streams open (--max-clients {self.config.max_clients}); "
                "try again later"))
            return
        client = _Client(ws, self.config.send_queue, f"stream{self.n_connections:06d}")
        self.clients.add(client)
        try:
            await self._serve_client(client)
        except ProtocolError as e:
            logger.info("%s: closed: %s", client.stream_id, e.reason)
            await self._close(client, e.code, e.reason)
        except ConnectionClosed:
            pass
        except Exception:  # noqa: BLE001 - e.g. a driver that cannot be built: this stream only
            logger.exception("%s: internal error", client.stream_id)
            await self._close(client, CLOSE_INTERNAL_ERROR, "internal server error (logged)")
        finally:
            await self._drop(client)

    async def _serve_client(self, client: _Client) -> None:
        ws = client.ws
        try:
            first = await asyncio.wait_for(ws.recv(), self.config.start_timeout_s)
        except asyncio.TimeoutError:  # noqa: UP041 - not the builtin TimeoutError on Python 3.10
            raise ProtocolError(CLOSE_BAD_MESSAGE,
                                f"no start message within {self.config.start_timeout_s:g} s") from None
        if isinstance(first, bytes):
            raise ProtocolError(CLOSE_BAD_MESSAGE, "audio before the start message")
        msg = parse_text(first)
        if msg["type"] != "start":
            raise ProtocolError(CLOSE_BAD_MESSAGE, f"expected a start message, got type {msg['type'][:30]!r}")
        req = parse_start(msg, self.config.langs)
        driver = await asyncio.get_running_loop().run_in_executor(None, self.make_driver, list(req.langs))
        save = (self.config.save_audio_dir / f"{client.stream_id}.wav") if self.config.save_audio_dir else None
        session = StreamSession(driver, req, save_path=save, clock=self.clock)
        client.session = session
        self._by_session[session] = client
        client.sender = asyncio.get_running_loop().create_task(self._sender(client))
        await ws.send(json.dumps({"type": "ready", "stream": client.stream_id, "langs": list(req.langs),
                                  "sample_rate": req.sample_rate, "sample_format": req.sample_format}))
        self.scheduler.add(session)
        async for message in ws:
            if client.closing:
                return
            if isinstance(message, bytes):
                if session.ended:
                    raise ProtocolError(CLOSE_BAD_MESSAGE, "audio after the end message")
                session.add_audio(decode_audio(message, req.sample_format))
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
        # the connection is closed (by the sender after the summary, or by the client): _drop frees it

    def _deliver(self, session: StreamSession, events: list, error: BaseException | None) -> None:
        """Scheduler callback (event loop): queue a step's events; close on error or a full queue."""
        client = self._by_session.get(session)
        if client is None or client.closing:
            return
        if error is not None:
            self._close_soon(client, CLOSE_INTERNAL_ERROR, f"translation failed: {type(error).__name__}")
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

    def _close_soon(self, client: _Client, code: int, reason: str) -> None:
        if client.closing:
            return
        client.closing = True
        if client.session is not None:
            self.scheduler.remove(client.session)
        logger.info("%s: closing: %s", client.stream_id, reason)
        asyncio.get_running_loop().create_task(client.ws.close(code, clip_reason(reason)))

    async def _close(self, client: _Client, code: int, reason: str) -> None:
        client.closing = True
        with contextlib.suppress(ConnectionClosed):
            await client.ws.close(code, clip_reason(reason))

    async def _drop(self, client: _Client) -> None:
        """Free everything of a connection that ended (normally, by a fault or by disconnecting)."""
        client.closing = True
        self.clients.discard(client)
        if client.sender is not None and not client.sender.done():
            client.sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed, Exception):
                await client.sender
        session = client.session
        if session is not None:
            self.scheduler.remove(session)
            self._by_session.pop(session, None)
            release = getattr(self.make_driver, "release", None)
            if release is not None:  # after any step of this driver still running on the compute thread
                await self.scheduler.run(release, session.driver)
            session.driver = None
            if session.save_path is not None:
                try:
                    await asyncio.get_running_loop().run_in_executor(None, session.save)
                except OSError as e:
                    logger.warning("%s: cannot save audio: %s", client.stream_id, e)
        client.session = None
        while not client.queue.empty():
            client.queue.get_nowait()


def _response(status: HTTPStatus, body: bytes, content_type: str) -> Response:
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(body))),
                       ("Content-Security-Policy", CSP), ("Cache-Control", "no-store"),
                       ("X-Content-Type-Options", "nosniff")])
    return Response(status.value, status.phrase, headers, body)
