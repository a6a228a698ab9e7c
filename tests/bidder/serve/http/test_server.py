"""bidder.serve.http over loopback: keep-alive, pipelining, bodies, slow and bad clients."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from bidder.serve.http.server import HttpServer
from tests.bidder.serve.http.routes import CAP, App, get, post

Served = tuple[App, HttpServer]


@pytest_asyncio.fixture
async def served() -> AsyncIterator[Served]:
    app = App()
    server = app.server()
    await server.listen("127.0.0.1", 0)
    try:
        yield app, server
    finally:
        app.release.set()
        await server.close(1.0)


Answer = tuple[int, dict[str, str], bytes]


async def read_answer(reader: asyncio.StreamReader) -> Answer:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.split(": ", 1) for line in lines[1:] if line)
    headers = {k.lower(): v for k, v in headers.items()}
    length = int(headers.get("content-length", "0"))
    body = await asyncio.wait_for(reader.readexactly(length), 5) if length else b""
    return status, headers, body


@contextlib.asynccontextmanager
async def connect(
    server: HttpServer,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1), 5) == b""


@pytest.mark.asyncio
async def test_a_keep_alive_connection_answers_request_after_request(served: Served) -> None:
    _app, server = served
    async with connect(server) as (reader, writer):
        for n in range(3):
            writer.write(post("/echo", b"n%d" % n))
            status, headers, body = await read_answer(reader)
            assert (status, body) == (200, b"POST n%d" % n)
            assert "date" in headers and "connection" not in headers


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/wait", "/later"])  # a coroutine; a future
async def test_pipelined_requests_are_answered_in_order_behind_one_that_awaits(
    served: Served, path: str
) -> None:
    app, server = served
    async with connect(server) as (reader, writer):
        writer.write(get(path) + post("/echo", b"second") + get("/echo"))
        await asyncio.sleep(0.05)
        assert [r.path for r in app.seen] == [path]  # the rest wait their turn
        app.release.set()
        answers = [await read_answer(reader) for _ in range(3)]
        assert [body for _, _, body in answers] == [b"waited", b"POST second", b"GET "]


@pytest.mark.asyncio
async def test_http_1_0_and_connection_close_end_the_connection_after_the_answer(
    served: Served,
) -> None:
    _, server = served
    for request in (b"GET /echo HTTP/1.0\r\n\r\n", get("/echo", "Connection: close")):
        async with connect(server) as (reader, writer):
            writer.write(request)
            status, headers, _ = await read_answer(reader)
            assert (status, headers["connection"]) == (200, "close")
            assert await closed(reader)


@pytest.mark.asyncio
async def test_a_chunked_body_is_reassembled(served: Served) -> None:
    _app, server = served
    async with connect(server) as (reader, writer):
        chunked = b"4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n"
        writer.write(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
        )
        assert (await read_answer(reader))[2] == b"POST abcdefg"


@pytest.mark.asyncio
async def test_expect_100_continue_is_answered_before_the_body(served: Served) -> None:
    _, server = served
    async with connect(server) as (reader, writer):
        head = (
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
        )
        writer.write(head)
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        writer.write(b"ok")
        assert (await read_answer(reader))[2] == b"POST ok"


@pytest.mark.asyncio
async def test_a_body_over_the_cap_is_dropped_and_the_connection_stays_in_step(
    served: Served,
) -> None:
    _, server = served
    async with connect(server) as (reader, writer):
        writer.write(post("/echo", b"x" * (CAP + 1)) + post("/echo", b"next"))
        assert (await read_answer(reader))[2] == b"POST  over-cap"
        assert (await read_answer(reader))[2] == b"POST next"


@pytest.mark.asyncio
async def test_a_request_not_whole_in_time_gets_the_routes_late_answer_and_a_close(
    served: Served,
) -> None:
    app, server = served
    async with connect(server) as (reader, writer):
        writer.write(post("/quick", b"0123456789")[:-4])  # 4 bytes of the body never come
        status, headers, _ = await read_answer(reader)
        assert (status, headers["x-late"], headers["connection"]) == (204, "1", "close")
        assert await closed(reader)
        assert app.seen == []


@pytest.mark.asyncio
async def test_bytes_that_are_not_http_get_a_400_and_a_close(served: Served) -> None:
    _, server = served
    async with connect(server) as (reader, writer):
        writer.write(b"\x00\x01 not http at all\r\n\r\n")
        status, headers, _ = await read_answer(reader)
        assert (status, headers["connection"]) == (400, "close")
        assert await closed(reader)


@pytest.mark.asyncio
async def test_unknown_paths_are_404_and_other_methods_405(served: Served) -> None:
    _, server = served
    async with connect(server) as (reader, writer):
        head = b"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\n"
        writer.write(get("/nowhere") + post("/boom", b"") + head + get("/echo"))
        answers = [await read_answer(reader) for _ in range(4)]
        assert [(status, body) for status, _, body in answers] == [
            (404, b"not found"),
            (405, b"method not allowed"),
            (405, b""),
            (200, b"GET "),
        ]


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/boom", "/boom-later"])  # raised; a failed future
async def test_a_handler_bug_is_a_500_and_the_connection_goes_on(served: Served, path: str) -> None:
    _, server = served
    async with connect(server) as (reader, writer):
        writer.write(get(path) + get("/echo"))
        assert [(await read_answer(reader))[0] for _ in range(2)] == [500, 200]


@pytest.mark.asyncio
async def test_headers_are_lower_case_repeats_joined_and_the_query_decoded(served: Served) -> None:
    app, server = served
    async with connect(server) as (reader, writer):
        writer.write(get("/echo?t=a%2Bb&p=1&t=second", "X-Ssp: one", "x-ssp: two"))
        await read_answer(reader)
        seen = app.seen[-1]
        assert seen.headers["x-ssp"] == "one, two"
        assert dict(seen.query) == {"t": "a+b", "p": "1"}


@pytest.mark.asyncio
async def test_close_answers_the_request_in_progress_then_closes() -> None:
    app = App()
    server = app.server()
    await server.listen("127.0.0.1", 0)
    port = server.port
    async with connect(server) as (busy, busy_writer), connect(server) as (idle, idle_writer):
        busy_writer.write(get("/wait"))
        idle_writer.write(get("/echo"))
        await read_answer(idle)
        await asyncio.sleep(0.05)
        closing = asyncio.create_task(server.close(5.0))
        assert await closed(idle)  # idle: closed at once
        app.release.set()
        status, headers, body = await read_answer(busy)
        assert (status, body, headers["connection"]) == (200, b"waited", "close")
        await closing
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
