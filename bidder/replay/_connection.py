"""One keep-alive HTTP/1.1 connection of the replay's client, on its own minimal transport.

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
becomes writable. (Reading with ``recvmsg`` costs ~3 us more per request than uvloop's
own transports: 20-26 against 18-23 us, 32 concurrent requests.)

httptools frames bodies (Content-Length or chunked); a response framed by connection
close ends at EOF. ``bidder.replay.client.HttpPool`` owns the connections.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import NamedTuple

import httptools

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


class StaleConnection(TransportError):
    """A reused keep-alive connection was closed before any byte of the answer."""


class Connection:
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
        # A write that fails at once (the peer reset the connection before the loop
        # read that) settles the future and clears ``_waiter`` inside ``_write``.
        waiter = self._waiter = self._loop.create_future()
        self._write(raw)
        self._sent_ns = time.perf_counter_ns()
        return waiter

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
            self._finish(StaleConnection("server closed an idle connection"))
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
