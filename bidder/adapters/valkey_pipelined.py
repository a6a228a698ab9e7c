"""One auto-pipelined connection to one Valkey server: the bid path's calls.

Theory of operation. A worker's bid path sends few kinds of commands (the fcap
check's HMGET or check.lua, the dedup claim's SET NX), many at once when requests
overlap. ``PipelinedConnection.send`` appends an encoded command to a buffer and
returns a plain future; the first command of a loop iteration schedules the flush
(``loop.call_soon``), so every command issued during that iteration leaves in ONE
``transport.write``. Valkey answers the commands of one connection in order, so
replies are matched to callers first in, first out; ``hiredis.Reader`` parses them.
No task per call, no connection pool, no per-call timer.

Time bound. ``send(command, until)`` takes an instant on the loop's clock. One
timer per connection (``bidder.core.deadlines``), armed at the earliest instant still
pending, fails the futures whose instant has passed with ``TimeoutError``. The command
itself is not cancelled (nothing can be, once written): its reply, when it comes, finds
its future done and is dropped, and the connection stays healthy. A caller that is
cancelled (the pipeline's deadline, ``bidder.pipeline.runner``) cancels its future:
the same. A call whose instant has already passed is never sent.

Bounds and failures.

- At most ``max_pending`` replies owed at once (including those whose callers gave
  up): past it, a call fails at once with ``TooManyPending``. A stalled server thus
  piles up a bounded backlog, not one command per request.
- A connection that owes replies and has answered nothing for ``silent_s`` belongs to
  a paused or stalled server: new calls fail at once with ``ServerSilent`` and are not
  sent, so a request spends no time waiting on it and a stopped server collects no
  backlog. The replies owed are enough to see it answer again; then calls go out.
- A connection that owes replies and has answered nothing for ``stall_timeout_s``
  is given up (a server that stopped without closing the socket).
- A lost connection (server killed, given up, protocol error) fails every owed
  future with ``ConnectionError`` (redis-py's, so callers catch ``RedisError``).
  While there is no connection, calls fail at once and start a connection attempt
  in the background, at most one per ``reconnect_interval_s``: no caller ever waits
  for a connect, and a dead server sees a bounded rate of attempts.

Error replies become redis-py's exceptions (``NoScriptError`` for NOSCRIPT, else
``ResponseError``), raised to the one caller whose command failed. RESP2 only; the
handshake (AUTH, SELECT) runs before the connection takes calls. A Valkey Cluster
is not for this class (one server; keys are not routed).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import hiredis
from redis.connection import parse_url
from redis.exceptions import ConnectionError as ValkeyConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError

from bidder.core.deadlines import Deadlines

log = logging.getLogger(__name__)

MAX_PENDING = 256
"""Replies owed at once on one connection before new calls fail fast."""
CONNECT_TIMEOUT_S = 0.5
RECONNECT_INTERVAL_S = 0.1
"""Connection attempts while the server is away are at least this far apart."""
SILENT_S = 0.1
"""A connection owing replies and silent this long fails new calls at once. A loopback
reply takes about 0.25 ms and a bid-path call waits at most a few ms, so a call made
now would time out too; it is this long, not a deadline's 8 ms, because the worker's
own stalls (a GC pass, the machine's other processes) leave replies unread in the
socket for tens of ms, which must not count as the server's silence."""
STALL_TIMEOUT_S = 1.0
"""A connection owing replies and silent this long is closed and made again."""

Arg = bytes | str | int
_INFINITY = float("inf")


class ServerSilent(ValkeyConnectionError):
    """The connection owes replies and the server has answered nothing for ``silent_s``."""


class TooManyPending(ValkeyConnectionError):
    """The connection owes ``max_pending`` replies already (a slow or stalled server)."""


def pack(*args: Arg) -> bytes:
    """One command as a RESP array of bulk strings (str as UTF-8, int in decimal)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        else:
            data = b"%d" % arg
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _time_out(future: asyncio.Future[Any]) -> None:
    future.set_exception(TimeoutError())


def forget(futures: Iterable[asyncio.Future[Any]]) -> None:
    """Give up on replies nobody will await: a future still owed is cancelled (its
    reply is dropped when it comes), a failed one is marked seen (asyncio would log
    "exception was never retrieved")."""
    for future in futures:
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            future.exception()


@dataclass(frozen=True, slots=True)
class Address:
    """Where the server is and how to log in: from a ``redis://``, ``rediss://`` or
    ``unix://`` URL (``Address.from_url``)."""

    host: str = "127.0.0.1"
    port: int = 6379
    path: str | None = None
    """A Unix socket instead of host and port."""
    tls: bool = False
    db: int = 0
    username: str | None = None
    password: str | None = None

    @classmethod
    def from_url(cls, url: str) -> Address:
        parsed = parse_url(url)
        tls = url.startswith("rediss://")
        return cls(
            host=parsed.get("host", "127.0.0.1"),
            port=int(parsed.get("port", 6379)),
            path=parsed.get("path"),
            tls=tls,
            db=int(parsed.get("db", 0)),
            username=parsed.get("username"),
            password=parsed.get("password"),
        )

    def handshake(self) -> list[bytes]:
        """The commands that make a new connection ready for calls."""
        commands = []
        if self.password is not None:
            login = (self.username, self.password) if self.username else (self.password,)
            commands.append(pack(b"AUTH", *login))
        if self.db:
            commands.append(pack(b"SELECT", self.db))
        return commands


class PipelinedConnection:
    """One connection to one server; see the module docstring. Build it on the loop
    that will use it."""

    def __init__(
        self,
        address: Address,
        *,
        max_pending: int = MAX_PENDING,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        reconnect_interval_s: float = RECONNECT_INTERVAL_S,
        silent_s: float = SILENT_S,
        stall_timeout_s: float = STALL_TIMEOUT_S,
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.address = address
        self.max_pending = max_pending
        self.connect_timeout_s = connect_timeout_s
        self.reconnect_interval_s = reconnect_interval_s
        self.silent_s = silent_s
        self.stall_timeout_s = stall_timeout_s
        self.commands = 0
        """Commands written."""
        self.writes = 0
        """``transport.write`` calls: one per loop iteration that sent anything."""
        self.dropped = 0
        """Replies that came for a caller who had given up (timed out or cancelled)."""
        self.connects = 0
        self.silenced = 0
        """Calls failed at once because the server was silent (``ServerSilent``)."""
        self._loop = asyncio.get_running_loop()
        self._wire: _Wire | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._next_attempt = -_INFINITY
        self._closed = False
        self._deadlines: Deadlines[asyncio.Future[Any]] = Deadlines(
            _time_out, asyncio.Future.done, after_fire=self._check_stall
        )

    @property
    def connected(self) -> bool:
        return self._wire is not None

    @property
    def pending(self) -> int:
        """Replies the current connection owes, including those nobody waits for."""
        return len(self._wire.pending) if self._wire is not None else 0

    async def connect(self) -> None:
        """Connect now unless connected. Raises ``ConnectionError`` (redis-py's); the
        connection then tries again when called (module docstring)."""
        if self._closed:
            raise ValkeyConnectionError("the Valkey connection is closed")
        if self._wire is not None:
            return
        attempt = self._connecting if self._connecting is not None else self._attempt()
        try:
            await asyncio.shield(attempt)
        except (OSError, TimeoutError, RedisError) as exc:
            raise ValkeyConnectionError(f"cannot connect to Valkey: {exc!r}") from exc

    def send(self, command: bytes, until: float = _INFINITY) -> asyncio.Future[Any]:
        """The reply to ``command`` (one RESP-encoded command, ``pack``), as a future.

        It fails with ``TimeoutError`` when no reply came by ``until`` (the loop's
        clock), with redis-py's ``ConnectionError`` when the connection is down, lost,
        silent (``ServerSilent``) or full (``TooManyPending``), or with the error the
        server replied.
        """
        future = self._loop.create_future()
        wire = self._wire
        if wire is None:
            self._reconnect_soon()
            future.set_exception(ValkeyConnectionError("no connection to Valkey"))
        elif wire.pending and (silent_s := self._loop.time() - wire.owed_since) > self.silent_s:
            self._give_up_if_stalled(wire)
            self.silenced += 1
            future.set_exception(ServerSilent(f"Valkey silent for {silent_s * 1000:.0f} ms"))
        elif len(wire.pending) >= self.max_pending:
            self._give_up_if_stalled(wire)
            future.set_exception(TooManyPending(f"{len(wire.pending)} Valkey replies pending"))
        elif until <= self._loop.time():
            future.set_exception(TimeoutError())
        else:
            wire.send(command, future)
            if until != _INFINITY:
                self._deadlines.add(until, future)
        return future

    async def aclose(self) -> None:
        """Close the connection; calls owed or made later fail with ConnectionError."""
        self._closed = True
        self._deadlines.clear()
        connecting = self._connecting
        if connecting is not None:
            connecting.cancel()
            await asyncio.wait([connecting])
        wire, self._wire = self._wire, None
        if wire is not None:
            await wire.close()

    # ------------------------------------------------------------------ internals

    def _check_stall(self) -> None:
        if self._wire is not None:
            self._give_up_if_stalled(self._wire)

    def _give_up_if_stalled(self, wire: _Wire) -> None:
        silent_s = self._loop.time() - wire.owed_since
        if wire.pending and silent_s > self.stall_timeout_s:
            log.warning(
                "Valkey owes %d replies and answered nothing for %.1f s: reconnecting",
                len(wire.pending), silent_s,
            )  # fmt: skip
            self._wire = None
            wire.abort()
            self._reconnect_soon()

    def _reconnect_soon(self) -> None:
        if self._closed or self._connecting is not None:
            return
        if self._loop.time() >= self._next_attempt:
            self._attempt()

    def _attempt(self) -> asyncio.Task[None]:
        self._next_attempt = self._loop.time() + self.reconnect_interval_s
        attempt = self._connecting = self._loop.create_task(self._open())
        attempt.add_done_callback(self._attempted)
        return attempt

    def _attempted(self, attempt: asyncio.Task[None]) -> None:
        self._connecting = None
        if not attempt.cancelled():
            attempt.exception()  # a failed attempt is made again on demand

    async def _open(self) -> None:
        address, loop = self.address, self._loop
        async with asyncio.timeout(self.connect_timeout_s):
            if address.path is not None:
                _, wire = await loop.create_unix_connection(lambda: _Wire(self), address.path)
            else:
                context = ssl.create_default_context() if address.tls else None
                _, wire = await loop.create_connection(
                    lambda: _Wire(self), address.host, address.port, ssl=context
                )
            try:
                for command in address.handshake():
                    reply = loop.create_future()
                    wire.send(command, reply)
                    await reply
            except BaseException:
                wire.abort()
                raise
        if self._closed:
            await wire.close()
            return
        self._wire = wire
        self.connects += 1

    def _lost(self, wire: _Wire, exc: Exception | None) -> None:
        if wire is not self._wire:
            return
        log.warning("Valkey connection lost: %r", exc)
        self._wire = None
        self._reconnect_soon()


class _Wire(asyncio.Protocol):
    """One socket: the commands waiting for the flush and the futures owed a reply,
    in the order the server answers them."""

    def __init__(self, owner: PipelinedConnection) -> None:
        self._owner = owner
        self._loop = owner._loop
        self._reader = hiredis.Reader(replyError=ResponseError)
        self._buffer: list[bytes] = []
        self._transport: asyncio.Transport | None = None
        self._closed = self._loop.create_future()
        self.pending: deque[asyncio.Future[Any]] = deque()
        self.owed_since = 0.0
        """When the server last answered, or was first owed a reply since it caught up."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def send(self, command: bytes, future: asyncio.Future[Any]) -> None:
        if not self.pending:
            self.owed_since = self._loop.time()
        self.pending.append(future)
        if not self._buffer:
            self._loop.call_soon(self._flush)
        self._buffer.append(command)

    def _flush(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return  # connection_lost fails the futures
        transport.write(b"".join(self._buffer))
        self._owner.commands += len(self._buffer)
        self._owner.writes += 1
        self._buffer.clear()

    def data_received(self, data: bytes) -> None:
        reader, pending = self._reader, self.pending
        reader.feed(data)
        self.owed_since = self._loop.time()
        try:
            while (reply := reader.gets()) is not False:
                future = pending.popleft()
                if future.done():
                    self._owner.dropped += 1
                elif isinstance(reply, ResponseError):
                    future.set_exception(_error(reply))
                else:
                    future.set_result(reply)
        except (hiredis.ProtocolError, IndexError) as exc:  # IndexError: a reply nobody asked for
            log.error("Valkey stream out of step, closing the connection: %r", exc)
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._buffer.clear()
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_exception(ValkeyConnectionError(f"Valkey connection lost: {exc!r}"))
        self._closed.set_result(None)
        self._owner._lost(self, exc)

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        await self._closed


def _error(reply: ResponseError) -> ResponseError:
    message = str(reply)
    return NoScriptError(message) if message.startswith("NOSCRIPT") else reply
