"""bidder.serve.http.protocol fed bytes directly: however a request is split across
reads it is read the same, and no bytes make it raise."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.serve.http.protocol import HttpProtocol
from tests.bidder.serve.http.routes import App, post

pytestmark = pytest.mark.pure


class Transport:
    """What the protocol writes, and whether it closed."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "a write after close"
        self.written += data

    def close(self) -> None:
        self.closed = True

    abort = close

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def feed(pieces: list[bytes]) -> tuple[App, Transport]:
    app = App()

    async def run() -> Transport:
        transport = Transport()
        protocol = HttpProtocol(app.server())
        protocol.connection_made(transport)  # type: ignore[arg-type]
        for piece in pieces:
            protocol.data_received(piece)
        return transport

    return app, asyncio.run(run())


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


_TOKEN = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz-"), min_size=1, max_size=12)


@given(
    st.binary(max_size=300),
    st.dictionaries(_TOKEN.map(lambda t: "x-" + t), _TOKEN, max_size=5),
    st.lists(st.integers(min_value=0), max_size=10),
)
def test_a_request_split_anywhere_is_read_the_same(
    body: bytes, headers: dict[str, str], cuts: list[int]
) -> None:
    raw = post("/echo?q=1", body, *(f"{k}: {v}" for k, v in headers.items()))
    whole_app, whole = feed([raw])
    split_app, in_pieces = feed(split(raw, cuts))
    assert [(r.path, r.query_string, r.headers, r.body) for r in split_app.seen] == [
        (r.path, r.query_string, r.headers, r.body) for r in whole_app.seen
    ]
    assert whole_app.seen[0].body == body
    assert {k: v for k, v in whole_app.seen[0].headers.items() if k.startswith("x-")} == headers
    assert (
        in_pieces.written.split(b"\r\n")[0]
        == whole.written.split(b"\r\n")[0]
        == (b"HTTP/1.1 200 OK")
    )


@given(st.binary(max_size=400), st.lists(st.integers(min_value=0), max_size=5))
def test_any_bytes_get_answers_or_a_400_and_never_raise(data: bytes, cuts: list[int]) -> None:
    _, transport = feed(split(data, cuts))
    answers = transport.written
    assert answers == b"" or answers.startswith(b"HTTP/1.1 ")
    if b"HTTP/1.1 400 " in answers:
        assert transport.closed and answers.endswith(b"malformed HTTP request")
