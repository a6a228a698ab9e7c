"""A lean HTTP/1.1 keep-alive client for load generation: non-blocking sockets + httptools.

Why not aiohttp's client: on a 2-core box the load generator shares the CPU with the
bidder under test, and aiohttp's client spends about three times the CPU per request
(measured: ~64 us against ~20 us, 64 concurrent keep-alive requests, uvloop). A replay
needs only a fixed host, pre-built request bytes, the status, two headers and the body.

Theory of operation. ``HttpPool`` keeps persistent connections to one host:port, one
request at a time on each (no pipelining). ``send`` opens a new connection while fewer
than ``spread`` exist, else takes the idle connection used least recently, else opens
a new one while fewer than ``max_connections`` exist, else queues (FIFO) for the next
one released; that queueing is real and shows up in the replay's corrected latency.
Why spread: a bidder's workers share one port (``SO_REUSEPORT``), and the kernel
places each *connection* on a worker. An exchange's many servers keep many
connections, so each worker gets about its share of the requests; a client reusing its
warmest connection sends nearly everything down one or two of them at a low rate
(measured: 88% of a 150 req/s replay to one of two workers), which no exchange does
and which a multi-worker bidder's pacing then meets as one busy node and one idle.
``_open`` counts connections plus slots reserved for connecting; a freed slot is handed
straight to a queued caller.
A connection is discarded when the server closes it or asks to (``Connection: close``),
when a response cannot be parsed, and when a request times out or is cancelled (a late
answer would otherwise be read as the answer to the next request). If the server
closed a reused keep-alive connection before answering, the request is retried once
on a fresh connection. Each connection (``bidder.replay._connection``) stamps an
answer's arrival with the kernel's receive time.
"""

from __future__ import annotations

import asyncio
import collections
import socket
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from bidder.replay._connection import Connection, Response, StaleConnection, TransportError

__all__ = [
    "DEFAULT_HEADERS",
    "HttpPool",
    "RequestTemplate",
    "Response",
    "TransportError",
    "encode_request",
    "split_url",
]

DEFAULT_HEADERS = ("x-nbr-reason", "x-nbr", "x-dedup-held", "x-stage-times", "x-campaign-trace")


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


class HttpPool:
    """Persistent connections to one ``host:port``; see the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_connections: int = 512,
        spread: int = 1,
        wanted_headers: Iterable[str] = DEFAULT_HEADERS,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        if not 1 <= spread <= max_connections:
            raise ValueError(f"spread must be in [1, max_connections], got {spread}")
        self.host, self.port, self.max_connections = host, port, max_connections
        self.spread = spread
        self._wanted = frozenset(name.lower().encode() for name in wanted_headers)
        self._idle: collections.deque[Connection] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[Connection | None]] = collections.deque()
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
            except StaleConnection:
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

    async def _acquire(self) -> Connection:
        if self._closed:
            raise TransportError("pool closed")
        if self._open < self.spread:
            self._open += 1
            return await self._connect()
        while self._idle:
            conn = self._idle.popleft()
            if not conn.closed:
                return conn
            self._open -= 1  # the server closed it while idle
        if self._open < self.max_connections:
            self._open += 1
            return await self._connect()
        waiter: asyncio.Future[Connection | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            handed = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._pass_on(waiter.result())  # handed over just as we were cancelled
            raise
        return handed if handed is not None else await self._connect()

    async def _connect(self) -> Connection:
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
        return Connection(sock, self._wanted)

    def _release(self, conn: Connection) -> None:
        if conn.closed or self._closed:
            self._discard(conn)
            return
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(conn)
        else:
            self._idle.append(conn)

    def _discard(self, conn: Connection) -> None:
        conn.close()
        self._free_slot()

    def _free_slot(self) -> None:
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(None)  # the slot moves to the waiter, which connects
        else:
            self._open -= 1

    def _pass_on(self, conn: Connection | None) -> None:
        if conn is None:
            self._free_slot()
        else:
            self._release(conn)

    def _next_waiter(self) -> asyncio.Future[Connection | None] | None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                return waiter
        return None
