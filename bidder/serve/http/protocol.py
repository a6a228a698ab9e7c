"""One client connection of the bid port: HTTP/1.1 parsed by ``httptools``.

A request is dispatched once it has arrived whole, from the parser's callback, so
the common bid (a body of a few KiB in one segment) costs no timer and no task: a
handler that answers without awaiting is written back at once, and only one that
awaits (a cap check) gets a task. Pipelined requests are answered in order, one at a
time. A request still arriving when its route's time is up is answered by the route's
``late`` answer (the bid path: a ``deadline`` no-bid) or 408, and the connection is
closed, since the rest of its bytes can't be told from the next request's.

A body over the cap is not kept: the bytes are read and dropped so the connection
stays in step, and the handler sees ``Request.over_cap``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, cast

import httptools

from bidder.core.futures import Later, Outcome
from bidder.serve.http.messages import DateLine, Request, Response, encode, text

log = logging.getLogger(__name__)

Handler = Callable[[Request], Response | Later[Response] | Awaitable[Response]]
"""Answers a request at once, or returns an awaitable of the answer."""


@dataclass(frozen=True)
class Route:
    handler: Handler
    arrive_within_s: float = 10.0
    """From the request's first byte to its last."""
    late: Callable[[float], Response] | None = None
    """The answer, given the first byte's time, to a request not whole in time; None: 408."""


class Host(Protocol):
    """What a connection needs of its server (``bidder.serve.http.server.HttpServer``)."""

    routes: dict[tuple[str, str], Route]
    now: Callable[[], float]
    max_body_bytes: int
    date: DateLine
    shortest_arrival_s: float
    longest_arrival_s: float
    connections: set[HttpProtocol]

    def dispatch(self, request: Request) -> Response | Later[Response] | Awaitable[Response]: ...

    def spawn(self, job: Coroutine[Any, Any, None]) -> None: ...

    def forget(self, conn: HttpProtocol) -> None: ...


MAX_QUEUED = 32
"""Pipelined requests waiting for their turn before reading pauses."""
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_BAD_REQUEST = encode(text(400, "malformed HTTP request"), b"", close=True)


class HttpProtocol(asyncio.Protocol):
    __slots__ = (
        "_answering",
        "_body",
        "_body_size",
        "_closing",
        "_headers",
        "_last_active",
        "_late",
        "_loop",
        "_over_cap",
        "_parser",
        "_queue",
        "_reading",
        "_server",
        "_started",
        "_timer",
        "_transport",
        "_url",
    )

    def __init__(self, server: Host) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._queue: deque[Request] = deque()
        self._answering = False
        """A handler is awaiting; what arrives meanwhile queues."""
        self._closing = False
        self._late: Response | None = None
        """The answer to a request that came too slowly, due after the one in progress."""
        self._reading = True
        self._timer: asyncio.TimerHandle | None = None
        self._last_active = server.now()
        self._started: float | None = None
        """When the message being read began; None between messages."""
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._over_cap = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.forget(self)
        self._transport = None
        self._queue.clear()
        self._cancel_timer()

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail()  # no protocol upgrades on the bid port
        except httptools.HttpParserError:
            self._fail()
        if self._started is not None and self._timer is None and self._transport is not None:
            self._arm_timer()

    def pause_writing(self) -> None:
        self._pause_reading()

    def resume_writing(self) -> None:
        self._resume_reading()

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._started = self._last_active = self._server.now()
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0
        self._over_cap = False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        decoded = value.decode("latin-1")
        seen = self._headers.get(key)
        self._headers[key] = decoded if seen is None else f"{seen}, {decoded}"

    def on_headers_complete(self) -> None:
        if self._headers.get("expect", "").lower() == "100-continue" and self._transport:
            self._transport.write(_CONTINUE)

    def on_body(self, chunk: bytes) -> None:
        self._body_size += len(chunk)
        if self._body_size > self._server.max_body_bytes:
            self._over_cap = True
            self._body.clear()
        else:
            self._body.append(chunk)

    def on_message_complete(self) -> None:
        started = self._started if self._started is not None else self._server.now()
        self._started = None
        self._cancel_timer()
        url = httptools.parse_url(self._url)
        request = Request(
            self._parser.get_method().decode("latin-1"),
            url.path.decode("latin-1") if url.path else "/",
            url.query.decode("latin-1") if url.query else "",
            self._headers,
            b"".join(self._body),
            started,
            over_cap=self._over_cap,
            close=not self._parser.should_keep_alive(),
        )
        self._body = []
        if self._answering or self._queue:
            self._queue.append(request)
            if len(self._queue) >= MAX_QUEUED:
                self._pause_reading()
        else:
            self._answer(request)

    # answering

    def _answer(self, request: Request) -> None:
        try:
            result = self._server.dispatch(request)
        except Exception:
            log.exception("bug answering %s %s", request.method, request.path)
            result = text(500, "internal error")
        if isinstance(result, Response):
            self._write(result, request.close)
            return
        self._answering = True
        if isinstance(result, Later):  # answered from a reply's done-callback, no task
            result.on_done(partial(self._answered, request.close))
        else:
            self._server.spawn(self._answer_later(result, request.close))

    def _answered(self, close: bool, outcome: Outcome[Response]) -> None:
        try:
            response = outcome.result()
        except asyncio.CancelledError:  # the server is stopping: the connection is aborted
            return
        except Exception:
            log.exception("bug answering a request")
            response = text(500, "internal error")
        self._deliver(response, close)

    async def _answer_later(self, pending: Awaitable[Response], close: bool) -> None:
        try:
            response = await pending
        except Exception:
            log.exception("bug answering a request")
            response = text(500, "internal error")
        self._deliver(response, close)

    def _deliver(self, response: Response, close: bool) -> None:
        """Write the answer in progress, then answer the requests queued behind it."""
        self._answering = False
        if self._late is not None:
            self._write(response, False)
            self._write(self._late, True)
            return
        self._write(response, close)
        while self._queue and not self._answering and self._transport is not None:
            self._answer(self._queue.popleft())
        if not self._queue:
            self._resume_reading()

    def _write(self, response: Response, close: bool) -> None:
        transport = self._transport
        if transport is None:  # the client went away; the answer is dropped
            return
        close = close or (self._closing and not self._queue)
        transport.write(encode(response, self._server.date(), close))
        self._last_active = self._server.now()
        if close:
            transport.close()
            self._transport = None

    def _fail(self) -> None:
        """Bytes that are not HTTP: say so and close (the stream can't be resynced)."""
        self._started = None
        self._cancel_timer()
        if self._transport is not None:
            self._transport.write(_BAD_REQUEST)
            self._transport.close()
            self._transport = None

    # a request that does not arrive in time

    def _arm_timer(self) -> None:
        assert self._started is not None
        route = self._route_so_far()
        within = route.arrive_within_s if route else self._server.shortest_arrival_s
        self._timer = self._loop.call_at(self._started + within, self._on_time_up)

    def _route_so_far(self) -> Route | None:
        if not self._url:
            return None
        try:
            method = self._parser.get_method().decode("latin-1")
            path = httptools.parse_url(self._url).path.decode("latin-1")
        except httptools.HttpParserError:
            return None
        return self._server.routes.get((method, path))

    def _on_time_up(self) -> None:
        self._timer = None
        started = self._started
        if started is None or self._transport is None:
            return
        route = self._route_so_far()
        within = route.arrive_within_s if route else self._server.longest_arrival_s
        if self._server.now() < started + within:  # the route's allowance is longer
            self._timer = self._loop.call_at(started + within, self._on_time_up)
            return
        self._started = None
        self._queue.clear()  # answered in order: what waits behind it can't be
        late = route.late(started) if route and route.late else text(408, "request too slow")
        if self._answering:  # the answer in progress goes first
            self._late = late
            return
        self._write(late, close=True)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # flow control and shutdown

    def _pause_reading(self) -> None:
        if self._reading and self._transport is not None:
            self._reading = False
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if not self._reading and self._transport is not None:
            self._reading = True
            self._transport.resume_reading()

    def idle_since(self) -> float | None:
        """When it last answered, if nothing is in progress or waiting; else None."""
        if self._answering or self._queue or self._started is not None:
            return None
        return self._last_active

    def close_when_done(self) -> None:
        """Close now if idle, else after the answers in progress (with ``Connection:
        close`` on the last)."""
        self._closing = True
        if self.idle_since() is not None and self._transport is not None:
            self._transport.close()
            self._transport = None

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
            self._transport = None
