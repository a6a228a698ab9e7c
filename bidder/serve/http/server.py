"""The bid port's listening socket, its connections, and their graceful close."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from bidder.core.futures import Later
from bidder.serve.http.messages import DateLine, Request, Response, text
from bidder.serve.http.protocol import HttpProtocol, Route

IDLE_TIMEOUT_S = 75.0
"""A keep-alive connection with nothing to answer for this long is closed."""
_SWEEP_S = 15.0


class HttpServer:
    """Routes requests by (method, path); 404 for an unknown path, 405 for a known
    path with another method."""

    def __init__(
        self,
        routes: Mapping[tuple[str, str], Route],
        *,
        now: Callable[[], float],
        max_body_bytes: int,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        self.routes = dict(routes)
        self.now = now
        self.max_body_bytes = max_body_bytes
        self.date = DateLine()
        self.connections: set[HttpProtocol] = set()
        self._paths = {path for _, path in routes}
        allowances = [r.arrive_within_s for r in routes.values()] or [10.0]
        self.shortest_arrival_s = min(allowances)
        self.longest_arrival_s = max(allowances)
        self._idle_timeout_s = idle_timeout_s
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._all_closed = asyncio.Event()

    def dispatch(self, request: Request) -> Response | Later[Response] | Awaitable[Response]:
        route = self.routes.get((request.method, request.path))
        if route is not None:
            return route.handler(request)
        status = 405 if request.path in self._paths else 404
        if request.method == "HEAD":  # an answer to HEAD has no body
            return Response(status)
        return text(status, "method not allowed" if status == 405 else "not found")

    def forget(self, conn: HttpProtocol) -> None:
        """A connection is gone."""
        self.connections.discard(conn)
        if not self.connections:
            self._all_closed.set()

    def spawn(self, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def listen(self, host: str, port: int, backlog: int = 4096) -> None:
        """Listen with SO_REUSEPORT, so several workers share the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: HttpProtocol(self),
            host,
            port,
            reuse_port=True,
            backlog=backlog,
            family=socket.AF_INET6 if ":" in host else socket.AF_INET,
        )
        self._sweeper = loop.create_task(self._sweep_idle())

    @property
    def port(self) -> int:
        """The port listened on (the one picked, when asked for port 0)."""
        assert self._server is not None, "not listening"
        return int(self._server.sockets[0].getsockname()[1])

    async def _sweep_idle(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            cutoff = self.now() - self._idle_timeout_s
            for conn in list(self.connections):
                idle = conn.idle_since()
                if idle is not None and idle < cutoff:
                    conn.close_when_done()

    async def close(self, drain_s: float) -> None:
        """Stop listening, close idle connections, let requests in progress be
        answered for up to ``drain_s`` (each last answer says ``Connection: close``),
        then drop what is left."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close_when_done()
        if self.connections:
            self._all_closed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_closed.wait(), drain_s)
        for conn in list(self.connections):
            conn.abort()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
