"""The load client's HTTP/1.1: asyncio protocols, httptools' C parser, a keep-alive pool.

Why not aiohttp here (it serves the simulator): with aiohttp every streamed chunk goes through
its StreamReader, wakes the request's task and re-arms the read timeout, and that machinery
cost more CPU than everything perfgate does with the chunk (py-spy, docs/benchmarks.md "The load
client"). Here the parser's body callback hands the bytes straight to the stream's sink,
inside the event loop's read callback: no task switch, no timer per chunk (a stall timer is
re-armed lazily, only when it fires), one clock read per socket read.

The stall timer measures time since the last sign of progress, never since the last byte: the
request sent, the response head complete, a data event that told something new (the sink
decides: a token, a count, a finish reason). A server that trickles an endless status line or
header, SSE comments (``: ping``), blank lines, ``event:`` lines without data, whitespace, data
events that carry nothing (``data: {}``, the same chunk again), or a body that is not the stream
it asked for keeps sending bytes but fails after ``stall_s`` all the same.

One connection serves one exchange at a time (no pipelining); the pool keeps idle keep-alive
connections, newest first. Failures are :class:`HTTPFailure` with a kind the streamer turns
into a failed request's reason.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal
from urllib.parse import urlsplit

import httptools

FailureKind = Literal["connect", "stale", "disconnected", "broken", "stall", "protocol", "sink"]


class Fed(IntEnum):
    """What a sink made of the bytes it was handed."""

    # Nothing new: comments, blank lines, part of an event, events that carry nothing.
    NOTHING = 0
    # A data event that told something new: the stream is alive (the stall timer starts again).
    PROGRESS = 1
    # The stream is over: the exchange ends before the message does.
    OVER = 2


# The members as plain module names: an enum member read through its class costs 0.1 us in
# CPython 3.11 (a descriptor), once or twice per streamed chunk (measured).
OVER, PROGRESS, NOTHING = Fed.OVER, Fed.PROGRESS, Fed.NOTHING

Sink = Callable[[bytes, float], Fed]
"""Takes a 200 response's body bytes and the time.monotonic() of the read that brought them;
says whether they made progress or ended the stream."""

# An error answer's body is kept up to this size, for its message.
_ERROR_BODY_BYTES = 64 * 1024
# How long a server that announced "Connection: close" is given to close before the client does.
_CLOSE_WAIT_S = 2.0
# Connects in flight at once when opening connections ahead of a measured phase.
_CONNECT_BATCH = 256


class HTTPFailure(Exception):
    """An exchange that failed below HTTP's status codes.

    ``stale``: a reused keep-alive connection failed before any answer, so the server never
    saw the request and it may be sent again; ``sink``: the sink raised (``__cause__``).
    """

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind


@dataclass(frozen=True)
class Response:
    """How an exchange ended: the status, the body of a response no sink consumed (an error
    answer's first 64 KB), and the time.monotonic() of the last read.

    ``not_stream``: the Content-Type of a 200 that a sink was waiting for but that is neither
    SSE nor JSON (an HTML page from a proxy, say): its body is kept here, not streamed.
    """

    status: int
    body: bytes
    end_s: float
    not_stream: str = ""


def _streamable(content_type: bytes) -> bool:
    """SSE or JSON (JSON: a server that answers in one piece; the stream's reader says what is
    missing), or no Content-Type at all."""
    media = content_type.split(b";", 1)[0].strip().lower()
    return media in (b"", b"text/event-stream", b"application/json") or media.endswith(b"+json")


class _Exchange:
    """One request and its response on a connection."""

    __slots__ = (
        "buffer",
        "content_type",
        "encoding",
        "framed",
        "future",
        "idle_bytes",
        "keep_alive",
        "last_s",
        "not_stream",
        "now",
        "over",
        "received",
        "server_closes",
        "sink",
        "status",
        "timer",
    )

    def __init__(self, sink: Sink | None, future: asyncio.Future[Response], now: float) -> None:
        self.sink = sink
        self.future = future
        self.status = 0
        self.keep_alive = False
        self.server_closes = False
        # Content-Length or chunked: the body's end is in the bytes, not at the connection's close.
        self.framed = False
        self.buffer = bytearray()
        self.received = False
        # The sink said the stream is over: the rest of the message is drained, not delivered.
        self.over = False
        # The last progress (see the module's docstring) and the bytes received since.
        self.last_s = now
        self.idle_bytes = 0
        self.now = now
        self.timer: asyncio.TimerHandle | None = None
        self.encoding = b""
        self.content_type = b""
        self.not_stream = ""


def _reraise(exc: BaseException) -> None:
    raise exc


def _interrupt(exc: BaseException) -> None:
    """Ctrl-C, or perfgate's Terminated (SIGTERM, SIGHUP), raised while a protocol callback ran:
    uvloop hands it to connection_lost as the transport's fatal error, and httptools wraps one
    raised inside its callbacks, so it would read as a broken connection (and a warmup that
    "failed"). Raised again from a plain callback, it leaves the event loop, as asyncio's own
    loop lets it from a protocol, and the run unwinds as it does anywhere else."""
    asyncio.get_running_loop().call_soon(_reraise, exc)


class _Connection(asyncio.Protocol):
    """An HTTP/1.1 connection driven by httptools' callbacks."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.exchange: _Exchange | None = None
        self.served = 0
        self.closed = False

    # -- asyncio.Protocol --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        ex = self.exchange
        if ex is None:
            # Bytes nobody asked for: the connection's state is unknown, so it is not reused.
            self.close()
            return
        ex.now = time.monotonic()
        ex.idle_bytes += len(data)
        ex.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            cause = e.__context__
            if cause is not None and not isinstance(cause, Exception):
                _interrupt(cause)
            if isinstance(cause, HTTPFailure):
                self._fail(ex, cause)
            else:
                what = str(cause) if isinstance(cause, ValueError) else f"{type(cause).__name__}: {cause}"
                self._fail(ex, HTTPFailure("sink", what), cause)
        except httptools.HttpParserError as e:
            self._fail(ex, HTTPFailure("protocol", f"invalid HTTP response: {e}"))

    def connection_lost(self, exc: BaseException | None) -> None:
        if exc is not None and not isinstance(exc, Exception):
            _interrupt(exc)
        self.closed = True
        self.pool.forget(self)
        ex = self.exchange
        if ex is None:
            return
        if ex.status and not ex.framed:
            # A body delimited by the connection's close ends here.
            ex.now = time.monotonic()
            self._complete(ex)
        elif not ex.received and self.served:
            self._fail(ex, HTTPFailure("stale", "a reused keep-alive connection was closed before any answer"))
        elif not ex.received:
            self._fail(ex, HTTPFailure("disconnected", "the server closed the connection before answering"))
        else:
            why = f"{type(exc).__name__}: {exc}" if exc else "the server closed it mid-body"
            self._fail(ex, HTTPFailure("broken", why))

    # -- httptools callbacks -------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        ex = self.exchange
        assert ex is not None
        name = name.lower()
        if name in (b"content-length", b"transfer-encoding"):
            ex.framed = True
        elif name == b"content-encoding" and value.lower() != b"identity":
            ex.encoding = value
        elif name == b"content-type":
            ex.content_type = value

    def on_headers_complete(self) -> None:
        ex = self.exchange
        assert ex is not None
        ex.status = self.parser.get_status_code()
        ex.last_s = ex.now
        ex.idle_bytes = 0
        ex.server_closes = not self.parser.should_keep_alive()
        ex.keep_alive = not ex.server_closes and self.pool.keep_alive
        if ex.encoding and ex.status == 200 and ex.sink is not None:
            encoding = ex.encoding.decode(errors="replace")
            raise HTTPFailure(
                "protocol",
                f"the stream is encoded (Content-Encoding: {encoding}) although the client asked for identity",
            )
        if ex.status == 200 and ex.sink is not None and not _streamable(ex.content_type):
            # Kept like an error answer's body, for the request's error to quote.
            ex.sink = None
            ex.not_stream = ex.content_type.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        ex = self.exchange
        assert ex is not None
        if ex.over:
            return
        if ex.sink is not None and ex.status == 200:
            fed = ex.sink(body, ex.now)
            if fed:
                ex.last_s = ex.now
                ex.idle_bytes = 0
            if fed is OVER:
                ex.over = True
                self._resolve(ex)
        elif len(ex.buffer) < _ERROR_BODY_BYTES:
            ex.buffer += body[: _ERROR_BODY_BYTES - len(ex.buffer)]

    def on_message_complete(self) -> None:
        ex = self.exchange
        assert ex is not None
        self._complete(ex)

    # -- exchanges -------------------------------------------------------------------------
    def send(self, head: bytes, body: bytes, sink: Sink | None, stall_s: float) -> asyncio.Future[Response]:
        loop = asyncio.get_running_loop()
        ex = _Exchange(sink, loop.create_future(), time.monotonic())
        ex.timer = loop.call_at(loop.time() + stall_s, self._check_stall, ex, stall_s)
        self.exchange = ex
        assert self.transport is not None
        self.transport.write(head + body)
        return ex.future

    def _check_stall(self, ex: _Exchange, stall_s: float) -> None:
        if self.exchange is not ex:
            return
        idle_s = time.monotonic() - ex.last_s
        if idle_s >= stall_s or ex.over:
            # Stalled, or a finished stream whose message never ended: either way this
            # connection cannot be reused.
            self._fail(ex, HTTPFailure("stall", _stall_message(ex, stall_s)))
        else:
            loop = asyncio.get_running_loop()
            ex.timer = loop.call_at(loop.time() + stall_s - idle_s, self._check_stall, ex, stall_s)

    def _resolve(self, ex: _Exchange) -> None:
        if not ex.future.done():
            ex.future.set_result(Response(ex.status, bytes(ex.buffer), ex.now, ex.not_stream))

    def _complete(self, ex: _Exchange) -> None:
        if ex.timer is not None:
            ex.timer.cancel()
        self._resolve(ex)
        self.exchange = None
        self.served += 1
        if ex.keep_alive and not self.closed:
            self.pool.release(self)
        elif ex.server_closes and not self.closed:
            # The side that closes first keeps the port in TIME_WAIT: let it be the server's,
            # so that a client opening a connection per request does not run out of ports.
            asyncio.get_running_loop().call_later(_CLOSE_WAIT_S, self.close)
        else:
            self.close()

    def _fail(self, ex: _Exchange, failure: HTTPFailure, cause: BaseException | None = None) -> None:
        if ex.timer is not None:
            ex.timer.cancel()
        if not ex.future.done():
            failure.__cause__ = cause
            ex.future.set_exception(failure)
        self.exchange = None
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


def _stall_message(ex: _Exchange, stall_s: float) -> str:
    what = f"no data for {stall_s:g} s"
    if not ex.idle_bytes:
        return what
    if not ex.status:
        return f"{what}: {ex.idle_bytes} bytes of a status line and headers that never ended"
    if ex.sink is not None and ex.status == 200:
        return (
            f"{what}: {ex.idle_bytes} bytes without progress (no token, count or finish reason: SSE comments, "
            "blank lines, event: lines, data events that carry nothing)"
        )
    if ex.not_stream:
        return f"{what}: {ex.idle_bytes} bytes of an HTTP 200 {ex.not_stream} body (not a stream) that never ended"
    return f"{what}: {ex.idle_bytes} bytes of an HTTP {ex.status} body that never ended"


def _header_lines(headers: Mapping[str, str]) -> bytes:
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")


class Pool:
    """Connections to one server; idle keep-alive ones are reused, newest first.

    ``headers`` go with every request (e.g. Authorization). Without ``keep_alive`` every
    request asks for ``Connection: close`` and gets a connection of its own.
    """

    def __init__(
        self, base_url: str, headers: Mapping[str, str], *, keep_alive: bool, connect_timeout_s: float = 30.0
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if parts.scheme == "https" else None
        self.keep_alive = keep_alive
        self.connect_timeout_s = connect_timeout_s
        host = self.host if ":" not in self.host else f"[{self.host}]"
        default_port = 443 if self.ssl else 80
        common = [
            f"Host: {host}" + (f":{self.port}" if self.port != default_port else ""),
            "User-Agent: perfgate",
            "Accept: */*",
            "Accept-Encoding: identity",
            "Connection: " + ("keep-alive" if keep_alive else "close"),
        ]
        self._common = "".join(line + "\r\n" for line in common).encode("latin-1")
        self._headers = self._common + _header_lines(headers)
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def head(self, method: str, path: str, body: bytes, headers: Mapping[str, str] | None = None) -> bytes:
        """The request line and headers of a JSON request with ``body``; ``headers`` replace the
        pool's own (e.g. another Authorization)."""
        return (
            f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1")
            + (self._headers if headers is None else self._common + _header_lines(headers))
            + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode("latin-1")
        )

    async def request(
        self,
        method: str,
        path: str,
        body: bytes,
        *,
        sink: Sink | None,
        stall_s: float,
        fresh: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """Send one request; returns when its sink says the stream is over or the message ends.

        ``fresh``: on a new connection, never an idle one; ``headers``: instead of the pool's.
        Raises :class:`HTTPFailure`.
        """
        conn = None if fresh else self._take_idle()
        if conn is None:
            conn = await self._connect()
        return await conn.send(self.head(method, path, body, headers), body, sink, stall_s)

    async def preconnect(self, n: int) -> None:
        """Open idle connections until there are ``n``, a batch at a time (a listening server
        queues only so many connects). The first failure stops it: the requests will meet it
        again and report it."""
        while len(self._idle) < n:
            batch = min(_CONNECT_BATCH, n - len(self._idle))
            opened = await asyncio.gather(*(self._connect() for _ in range(batch)), return_exceptions=True)
            self._idle.extend(c for c in opened if isinstance(c, _Connection))
            if len(opened) != sum(isinstance(c, _Connection) for c in opened):
                return

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        where = f"{self.host}:{self.port}"
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port, ssl=self.ssl),
                self.connect_timeout_s,
            )
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            raise HTTPFailure("connect", f"no connection to {where} within {self.connect_timeout_s:g} s") from None
        except OSError as e:
            raise HTTPFailure("connect", f"cannot connect to {where}: {type(e).__name__}: {e}") from None
        self._open.add(conn)
        return conn

    def release(self, conn: _Connection) -> None:
        self._idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        self._open.discard(conn)

    def close(self) -> None:
        """Close every connection, busy or idle."""
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
