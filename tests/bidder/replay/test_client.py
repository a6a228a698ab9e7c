"""The keep-alive load client against real servers on loopback."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from bidder.replay.client import HttpPool, Response, TransportError, encode_request, split_url
from bidder.stack.child import held_port

BID_JSON = b'{"id":"1","cur":"USD","seatbid":[]}'


class Server:
    """An aiohttp app that records what it saw; ``release`` frees held requests."""

    def __init__(self) -> None:
        self.peers: collections.Counter[int] = collections.Counter()
        """Requests by the client's port: one entry per connection."""
        self.pending = 0
        self.max_pending = 0
        self.release = asyncio.Event()
        self.changed = asyncio.Condition()
        self.seen_headers: list[dict[str, str]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/bid", self.bid)
        app.router.add_post("/nobid", self.nobid)
        app.router.add_get("/chunked", self.chunked)
        app.router.add_get("/close", self.close)
        app.router.add_post("/hold", self.hold)
        return app

    async def bid(self, request: web.Request) -> web.Response:
        transport = request.transport
        assert transport is not None
        self.peers[transport.get_extra_info("peername")[1]] += 1
        self.seen_headers.append(dict(request.headers))
        return web.Response(body=await request.read(), content_type="application/json")

    async def nobid(self, request: web.Request) -> web.Response:
        return web.Response(
            status=204, headers={"X-Nbr-Reason": "geo", "X-Nbr": "0", "X-Other": "1"}
        )

    async def chunked(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in (b'{"a":', b"1", b"}"):
            await response.write(part)
        await response.write_eof()
        return response

    async def close(self, request: web.Request) -> web.Response:
        return web.Response(text="bye", headers={"Connection": "close"})

    async def hold(self, request: web.Request) -> web.Response:
        async with self.changed:
            self.pending += 1
            self.max_pending = max(self.max_pending, self.pending)
            self.changed.notify_all()
        await self.release.wait()
        self.pending -= 1
        return web.Response(status=204)


@pytest_asyncio.fixture
async def server(aiohttp_server) -> AsyncIterator[tuple[Server, HttpPool]]:
    state = Server()
    test_server = await aiohttp_server(state.app())
    pool = HttpPool("127.0.0.1", test_server.port, max_connections=4)
    yield state, pool
    state.release.set()
    await pool.close()


@contextlib.asynccontextmanager
async def raw_server(
    answer: bytes, close_after_answer: bool
) -> AsyncIterator[tuple[int, list[int]]]:
    """A bare socket server for framings aiohttp never sends; yields (port, accept count)."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                await reader.readexactly(length)
                writer.write(answer)
                await writer.drain()
                if close_after_answer:
                    break
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1], accepted
    finally:
        srv.close()
        await srv.wait_closed()


@pytest.mark.asyncio
async def test_post_returns_status_body_and_sends_headers(server):
    state, pool = server
    response = await pool.request("POST", "/bid", BID_JSON, {"X-Ssp": "alpha"}, timeout_s=2)
    assert (response.status, response.body, response.headers) == (200, BID_JSON, {})
    assert state.seen_headers[0]["X-Ssp"] == "alpha"
    assert state.seen_headers[0]["Content-Length"] == str(len(BID_JSON))


@pytest.mark.asyncio
async def test_no_bid_returns_only_the_wanted_headers_lowercased(server):
    _, pool = server
    response = await pool.request("POST", "/nobid", b"{}", timeout_s=2)
    assert response.status == 204
    assert response.headers == {"x-nbr-reason": "geo", "x-nbr": "0"}
    assert response.body == b""


@pytest.mark.asyncio
async def test_sequential_requests_reuse_one_connection(server):
    state, pool = server
    for _ in range(5):
        await pool.request("POST", "/bid", b"{}", timeout_s=2)
    assert len(state.peers) == 1
    assert pool.open_connections == 1


@pytest.mark.asyncio
async def test_a_spread_pool_sends_in_turn_over_its_connections(aiohttp_server):
    """Sequential requests, so one connection would do: a spread of 3 opens three and
    uses them in turn, as an exchange's many connections share its requests."""
    state = Server()
    test_server = await aiohttp_server(state.app())
    pool = HttpPool("127.0.0.1", test_server.port, max_connections=8, spread=3)
    try:
        for _ in range(9):
            await pool.request("POST", "/bid", b"{}", timeout_s=2)
    finally:
        await pool.close()
    assert sorted(state.peers.values()) == [3, 3, 3]


@pytest.mark.parametrize("spread", [0, 9])
def test_a_spread_outside_one_to_max_connections_is_refused(spread: int) -> None:
    with pytest.raises(ValueError, match="spread"):
        HttpPool("127.0.0.1", 1, max_connections=8, spread=spread)


@pytest.mark.asyncio
async def test_chunked_body_is_reassembled(server):
    _, pool = server
    response = await pool.request("GET", "/chunked", timeout_s=2)
    assert (response.status, response.body) == (200, b'{"a":1}')


@pytest.mark.asyncio
async def test_connection_close_from_server_reconnects(server):
    _, pool = server
    first = await pool.request("GET", "/close", timeout_s=2)
    second = await pool.request("POST", "/bid", b"{}", timeout_s=2)
    assert (first.body, second.status) == (b"bye", 200)
    assert pool.open_connections == 1


@pytest.mark.asyncio
async def test_timeout_raises_and_discards_the_connection(server):
    state, pool = server
    with pytest.raises(TimeoutError):
        await pool.request("POST", "/hold", b"{}", timeout_s=0.02)
    assert pool.open_connections == 0
    state.release.set()
    assert (await pool.request("POST", "/bid", b"{}", timeout_s=2)).status == 200


@pytest.mark.asyncio
async def test_requests_beyond_max_connections_wait_for_a_free_one(server):
    state, pool = server  # max_connections=4
    calls = [
        asyncio.create_task(pool.request("POST", "/hold", b"{}", timeout_s=5)) for _ in range(10)
    ]
    async with state.changed:
        await state.changed.wait_for(lambda: state.pending == 4)
    await asyncio.sleep(0.01)  # give a fifth request every chance to (wrongly) get through
    assert state.pending == 4
    state.release.set()
    assert [r.status for r in await asyncio.gather(*calls)] == [204] * 10
    assert state.max_pending == 4
    assert pool.open_connections == 4


@pytest.mark.asyncio
async def test_refused_connection_is_a_transport_error():
    pool = HttpPool("127.0.0.1", held_port())  # a port nobody listens on
    with pytest.raises(TransportError):
        await pool.request("GET", "/", timeout_s=2)
    assert pool.open_connections == 0
    await pool.close()


@pytest.mark.asyncio
async def test_server_closing_kept_alive_connections_is_retried_transparently():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"  # keep-alive implied, then closed
    async with raw_server(answer, close_after_answer=True) as (port, accepted):
        pool = HttpPool("127.0.0.1", port)
        bodies = [(await pool.request("POST", "/", b"{}", timeout_s=2)).body for _ in range(3)]
        await pool.close()
    assert bodies == [b"ok"] * 3
    assert len(accepted) == 3


@pytest.mark.asyncio
async def test_body_framed_by_connection_close_is_read_to_eof():
    answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil-eof"
    async with raw_server(answer, close_after_answer=True) as (port, _):
        pool = HttpPool("127.0.0.1", port)
        response = await pool.request("GET", "/", timeout_s=2)
        await pool.close()
    assert (response.status, response.body) == (200, b"until-eof")


@pytest.mark.asyncio
async def test_garbage_response_is_a_transport_error():
    async with raw_server(b"NOT HTTP AT ALL\r\n\r\n", close_after_answer=False) as (port, _):
        pool = HttpPool("127.0.0.1", port)
        with pytest.raises(TransportError):
            await pool.request("GET", "/", timeout_s=2)
        assert pool.open_connections == 0
        await pool.close()


MS = 1_000_000


class _ThreadServer:
    """Answers each request at once from a thread of its own (the test's loop may be
    blocked meanwhile) and notes, on the ``perf_counter_ns`` clock, when it began and
    finished writing each answer; ``answered`` is released once per answer written."""

    ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.wrote_ns: list[tuple[int, int]] = []
        self.answered = threading.Semaphore(0)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while conn.recv(65536):
                began_ns = time.perf_counter_ns()
                conn.sendall(self.ANSWER)
                self.wrote_ns.append((began_ns, time.perf_counter_ns()))
                self.answered.release()

    def close(self) -> None:
        self.listener.close()


async def _answer_read_late(server: _ThreadServer, pool: HttpPool, busy_s: float) -> Response:
    """One request whose answer is in the socket ``busy_s`` before the client reads it."""
    pending = asyncio.ensure_future(pool.request("POST", "/", b"{}", timeout_s=5))
    await asyncio.sleep(0)  # the request goes out
    # The client is busy (the loop blocked) until the answer is in its socket, and
    # ``busy_s`` more: a stamp taken on read would be at least that late.
    assert server.answered.acquire(timeout=5)
    time.sleep(busy_s)  # noqa: ASYNC251 - blocking the loop is the point
    return await pending


@pytest.mark.asyncio
async def test_an_answer_is_timed_at_its_arrival_not_when_a_busy_client_reads_it():
    server = _ThreadServer()
    pool = HttpPool("127.0.0.1", server.port)
    try:
        for _ in range(3):  # connected and warm
            await pool.request("POST", "/", b"{}", timeout_s=5)
        for _ in range(3):  # the warm-up answers are all written
            assert server.answered.acquire(timeout=5)
        # The kernel turns receive stamps on by deferred work after the first socket
        # asks: until that has run (later on a loaded machine), answers are stamped
        # when read. Warm up until one short wait shows a stamp before the read.
        for _ in range(50):
            warm = await _answer_read_late(server, pool, 0.02)
            if warm.arrived_ns <= server.wrote_ns[-1][1] + 10 * MS:
                break
        response = await _answer_read_late(server, pool, 0.3)
    finally:
        await pool.close()
        server.close()
    began_ns, wrote_ns = server.wrote_ns[-1]
    # The kernel stamps on arrival, between the server's two readings, on the wall
    # clock; mapped onto perf_counter it is off by microseconds, or by a preemption
    # between two clock reads on a loaded machine: 100 ms either way is still far
    # from the 300 ms a stamp on read would show.
    assert began_ns - 100 * MS <= response.arrived_ns <= wrote_ns + 100 * MS


class _ResettingServer:
    """Answers one request on its first connection, then resets it (a worker killed
    with SIGKILL); answers every request on the connections after it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.reset = threading.Event()
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                self.connections += 1
                with conn:
                    while conn.recv(65536):
                        conn.sendall(_ThreadServer.ANSWER)
                        if self.connections == 1:  # close with RST, not FIN
                            conn.setsockopt(
                                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                            )
                            break
                self.reset.set()

    def close(self) -> None:
        self.listener.close()


@pytest.mark.asyncio
async def test_a_write_to_a_reset_connection_is_retried_on_a_new_one():
    """The reset reaches the socket before the client's loop has read it, so the next
    request's write fails at once: that is a stale connection, tried once more."""
    server = _ResettingServer()
    pool = HttpPool("127.0.0.1", server.port)
    try:
        await pool.request("POST", "/", b"{}", timeout_s=5)
        assert server.reset.wait(timeout=5)
        time.sleep(0.05)  # noqa: ASYNC251 - the loop must not see the reset before the write
        response = await pool.request("POST", "/", b"{}", timeout_s=5)
    finally:
        await pool.close()
        server.close()
    assert (response.status, response.body, server.connections) == (200, b"ok", 2)


def test_encoded_request_has_length_and_no_body_headers_for_get():
    assert encode_request("POST", "h:1", "/b", b"{}", {"X-Ssp": "a"}) == (
        b"POST /b HTTP/1.1\r\nHost: h:1\r\nX-Ssp: a\r\nContent-Length: 2\r\n\r\n{}"
    )
    assert encode_request("GET", "h:1", "/n?p=1") == b"GET /n?p=1 HTTP/1.1\r\nHost: h:1\r\n\r\n"


def test_header_injection_is_refused():
    with pytest.raises(ValueError, match="line break"):
        encode_request("POST", "h:1", "/b", b"", {"X-Ssp": "a\r\nX-Evil: 1"})


def test_split_url_accepts_only_plain_http():
    assert split_url("http://127.0.0.1:8080/notice/win?p=1.5") == (
        "127.0.0.1",
        8080,
        "/notice/win?p=1.5",
    )
    assert split_url("http://bidder") == ("bidder", 80, "/")
    with pytest.raises(ValueError):
        split_url("https://bidder/x")
