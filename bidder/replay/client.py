"""A lean HTTP/1.1 keep-alive client for load generation: non-blocking sockets + httptools.

Why not aiohttp's client: on a 2-core box the load generator shares the CPU with the
bidder under test, and aiohttp's client spends about three times the CPU per request
(measured: ~64 us against ~20 us, 64 concurrent keep-alive requests, uvloop). A replay
needs only a fixed host, pre-built request bytes, the status, two headers and the body.
(Reading with ``recvmsg`` for kernel timestamps, below, costs ~3 us more per request
than uvloop's own transports: 20-26 against 18-23 us, 32 concurrent requests.)

Theory of operation. ``HttpPool`` keeps persistent connections to one host:port, one
request at a time on each (no pipelining). ``send`` takes an idle connection (the most
recently used first: it is warm), else opens a new one while fewer than
``max_connections`` exist, else queues (FIFO) for the next one released; that queueing
is real and shows up in the replay's corrected latency. ``_open`` counts connections
plus slots reserved for connecting; a freed slot is handed straight to a queued caller.
A connection is discarded when the server closes it or asks to (``Connection: close``),
when a response cannot be parsed, and when a request times out or is cancelled (a late
answer would otherwise be read as the answer to the next request). If the server
closed a reused keep-alive connection before answering, the request is retried once
on a fresh connection. httptools frames bodies (Content-Length or chunked); a response
framed by connection close ends at EOF.

When an answer arrived is the kernel's word, not the loop's: each connection asks for
receive timestamps (``SO_TIMESTAMPNS``) and reads with ``recvmsg``, so
``Response.arrived_ns`` is when the last bytes of the answer reached the socket. On a
small machine the load generator shares the cores with the bidder; the time it waited
for a core before reading an answer is its own delay, and a dedicated load-generator
host would not add it (timed at the read, half of the answers counted late in the chaos
suite's ``steady`` are late only on the client's side of the socket). Without kernel
timestamps (another OS) it falls back to the time of the read. So connections use their
own minimal transport: a non-blocking socket with ``add_reader``, and writes that go
out at once (a request is a few KB) or, when the socket buffer is full, as the socket
becomes writable.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import struct
import time
from collections.abc import Iterable, Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

import httptools

DEFAULT_HEADERS = ("x-nbr-reason", "x-nbr", "x-dedup-held")
_FRAMING = (b"content-length", b"transfer-encoding")
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python 3.11 lacks the name
_SCM_TIMESTAMPNS = _SO_TIMESTAMPNS
_TIMESPEC = struct.Struct("@qq")  # struct timespec: seconds, nanoseconds (CLOCK_REALTIME)
_READ_BYTES = 1 << 16
_CMSG_BYTES = socket.CMSG_SPACE(_TIMESPEC.size)


class Response(NamedTuple):
    status: int
    headers: dict[str, str]
    """Only the wanted headers, names lowercased."""
    body: bytes
    sent_ns: int
    """``perf_counter_ns()`` when the request was written: after any wait for a connection."""
    arrived_ns: int
    """``perf_counter_ns()`` time at which the answer's last bytes reached the socket (the
    kernel's receive timestamp; the read's time where there is none)."""


class TransportError(Exception):
    """The request failed below HTTP: connect refused, connection lost, bad response."""


class _StaleConnection(TransportError):
    """A reused keep-alive connection was closed before any byte of the answer."""


class RequestTemplate:
    """Requests that differ only in body: the head is encoded once, each request is one join."""

    def __init__(
        self, method: str, host: str, target: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self.method = method
        self._head = _encode_head(method, host, target, headers or {})

    def build(self, body: bytes = b"") -> bytes:
        if not body and self.method in ("GET", "HEAD", "DELETE"):
            return self._head + b"\r\n"
        return b"%sContent-Length: %d\r\n\r\n%s" % (self._head, len(body), body)


def encode_request(
    method: str, host: str, target: str, body: bytes = b"", headers: Mapping[str, str] | None = None
) -> bytes:
    """The complete bytes of one request."""
    return RequestTemplate(method, host, target, headers).build(body)


def _encode_head(method: str, host: str, target: str, headers: Mapping[str, str]) -> bytes:
    """Request line and headers, each ending in CRLF; ValueError on header injection."""
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {host}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    for line in lines:
        if "\r" in line or "\n" in line:
            raise ValueError(f"line break inside a request line or header: {line!r}")
    return "".join(f"{line}\r\n" for line in lines).encode("latin-1")


def split_url(url: str) -> tuple[str, int, str]:
    """(host, port, request target) of a plain ``http://`` URL; ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not a plain http:// URL: {url!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, parts.port or 80, target


class _Connection:
    """One keep-alive connection: a non-blocking socket read on the loop's reader callback
    (module doc), fed to httptools."""

    def __init__(self, sock: socket.socket, wanted: frozenset[bytes]) -> None:
        self._loop = asyncio.get_running_loop()
        self._sock, self._fd = sock, sock.fileno()
        self._wanted = wanted
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Response] | None = None
        self._unsent = b""
        self.closed = False
        self.used = False
        self._sent_ns = self._arrived_ns = 0
        self._stamped = _ask_for_timestamps(sock)
        self._start_message()
        self._loop.add_reader(self._fd, self._readable)

    def request(self, raw: bytes) -> asyncio.Future[Response]:
        if self.closed:
            raise TransportError("connection is not open")
        self._waiter = self._loop.create_future()
        self._write(raw)
        self._sent_ns = time.perf_counter_ns()
        return self._waiter

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._loop.remove_reader(self._fd)
        if self._unsent:
            self._loop.remove_writer(self._fd)
        self._sock.close()

    def _write(self, data: bytes) -> None:
        if not self._unsent:
            try:
                sent = self._sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self._lost(exc)
                return
            data = data[sent:]
            if not data:
                return
            self._loop.add_writer(self._fd, self._writable)
        self._unsent += data

    def _writable(self) -> None:
        try:
            sent = self._sock.send(self._unsent)
        except BlockingIOError:
            return
        except OSError as exc:
            self._lost(exc)
            return
        self._unsent = self._unsent[sent:]
        if not self._unsent:
            self._loop.remove_writer(self._fd)

    def _readable(self) -> None:
        while not self.closed:
            try:
                data, ancillary, _, _ = self._sock.recvmsg(_READ_BYTES, _CMSG_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._lost(exc)
                return
            if not data:
                self._lost(None)
                return
            self._arrived_ns = _arrival(ancillary) if self._stamped else time.perf_counter_ns()
            self._data_received(data)

    def _lost(self, exc: Exception | None) -> None:
        self.close()
        self._connection_lost(exc)

    def _data_received(self, data: bytes) -> None:
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._finish(TransportError(f"bad HTTP response: {exc}"))
            self.close()

    def _connection_lost(self, exc: Exception | None) -> None:
        if self._waiter is None:
            return
        if self._headers_done and not self._framed:
            self.on_message_complete()  # the body was framed by the close itself
        elif self.used and not self._received:
            self._finish(_StaleConnection("server closed an idle connection"))
        else:
            self._finish(TransportError(f"connection lost: {exc or 'closed by server'}"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in _FRAMING:
            self._framed = True
        elif name in self._wanted:
            self._headers[name.decode()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        status, body = self._parser.get_status_code(), b"".join(self._body)
        arrived_ns = max(self._arrived_ns, self._sent_ns)  # clocks of two sources: never before
        response = Response(status, self._headers, body, self._sent_ns, arrived_ns)
        if not self._parser.should_keep_alive() or self._waiter is None:
            self.close()  # asked to close, or an answer nobody asked for
        self.used = True
        self._start_message()
        self._finish(response)

    def _start_message(self) -> None:
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._framed = self._headers_done = self._received = False

    def _finish(self, outcome: Response | Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        if isinstance(outcome, Exception):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)


def _ask_for_timestamps(sock: socket.socket) -> bool:
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _arrival(ancillary: list[tuple[int, int, bytes]]) -> int:
    """The kernel's receive time of a read, on the ``perf_counter_ns`` clock.

    The kernel stamps with the wall clock; it is mapped through the wall clock's offset
    now (a clock step between arrival and read would shift it, so it is capped at now).
    """
    now = time.perf_counter_ns()
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SCM_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanos = _TIMESPEC.unpack_from(data)
            return min(now, seconds * 1_000_000_000 + nanos - (time.time_ns() - now))
    return now


class HttpPool:
    """Persistent connections to one ``host:port``; see the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_connections: int = 512,
        wanted_headers: Iterable[str] = DEFAULT_HEADERS,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        self.host, self.port, self.max_connections = host, port, max_connections
        self._wanted = frozenset(name.lower().encode() for name in wanted_headers)
        self._idle: list[_Connection] = []
        self._waiters: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()
        self._open = 0
        self._closed = False

    @property
    def open_connections(self) -> int:
        return self._open

    async def request(
        self,
        method: str,
        target: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        *,
        timeout_s: float,
    ) -> Response:
        """Build and send one request; see ``send``."""
        raw = encode_request(method, f"{self.host}:{self.port}", target, body, headers)
        return await self.send(raw, asyncio.get_running_loop().time() + timeout_s)

    async def send(self, raw: bytes, deadline: float) -> Response:
        """Send pre-built request bytes; TimeoutError past ``deadline`` (loop time)."""
        async with asyncio.timeout_at(deadline):
            try:
                return await self._attempt(raw)
            except _StaleConnection:
                return await self._attempt(raw)  # the server's keep-alive ran out: once more

    async def close(self) -> None:
        """Close idle connections now; busy ones close when their request ends."""
        self._closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(TransportError("pool closed"))
        while self._idle:
            self._discard(self._idle.pop())

    async def _attempt(self, raw: bytes) -> Response:
        conn = await self._acquire()
        try:
            response = await conn.request(raw)
        except BaseException:
            self._discard(conn)
            raise
        self._release(conn)
        return response

    async def _acquire(self) -> _Connection:
        if self._closed:
            raise TransportError("pool closed")
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
            self._open -= 1  # the server closed it while idle
        if self._open < self.max_connections:
            self._open += 1
            return await self._connect()
        waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            handed = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._pass_on(waiter.result())  # handed over just as we were cancelled
            raise
        return handed if handed is not None else await self._connect()

    async def _connect(self) -> _Connection:
        """Open a connection in a slot already counted in ``_open``."""
        loop = asyncio.get_running_loop()
        sock: socket.socket | None = None
        try:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            family, kind, proto, _, address = infos[0]
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except BaseException as exc:
            if sock is not None:
                sock.close()
            self._free_slot()
            if isinstance(exc, OSError):
                raise TransportError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
            raise
        return _Connection(sock, self._wanted)

    def _release(self, conn: _Connection) -> None:
        if conn.closed or self._closed:
            self._discard(conn)
            return
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(conn)
        else:
            self._idle.append(conn)

    def _discard(self, conn: _Connection) -> None:
        conn.close()
        self._free_slot()

    def _free_slot(self) -> None:
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(None)  # the slot moves to the waiter, which connects
        else:
            self._open -= 1

    def _pass_on(self, conn: _Connection | None) -> None:
        if conn is None:
            self._free_slot()
        else:
            self._release(conn)

    def _next_waiter(self) -> asyncio.Future[_Connection | None] | None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                return waiter
        return None
