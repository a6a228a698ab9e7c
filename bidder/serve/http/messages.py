"""Requests as the bid port's handlers see them, answers as they go on the wire.

A ``Request`` is whole when a handler gets it: the protocol reads the body before
dispatching (within the body cap and the deadline, see ``bidder.serve.http.protocol``).
A ``Response`` keeps its header lines encoded, so the answers every bid repeats (the
204 of each no-bid reason, the headers of a bid) are rendered once at import.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import parse_qsl

import orjson


class Request:
    """One HTTP request, its body read. Header names are lower case; a repeated
    header's values are joined with ``", "`` (RFC 9110 5.3)."""

    __slots__ = (
        "_query",
        "body",
        "close",
        "headers",
        "method",
        "over_cap",
        "path",
        "query_string",
        "received",
    )

    def __init__(
        self,
        method: str,
        path: str,
        query_string: str,
        headers: dict[str, str],
        body: bytes,
        received: float,
        *,
        over_cap: bool = False,
        close: bool = False,
    ) -> None:
        self.method = method
        self.path = path
        self.query_string = query_string
        self.headers = headers
        self.body = body
        self.received = received
        """Monotonic seconds when the request's first byte was read."""
        self.over_cap = over_cap
        """The body was longer than the server's cap and was dropped (``body`` is empty)."""
        self.close = close
        """The client asked to close the connection after the answer."""
        self._query: dict[str, str] | None = None

    @property
    def query(self) -> Mapping[str, str]:
        """The query's parameters, decoded; a repeated name keeps its first value."""
        if self._query is None:
            found: dict[str, str] = {}
            for name, value in parse_qsl(self.query_string, keep_blank_values=True):
                found.setdefault(name, value)
            self._query = found
        return self._query


class Response:
    """An answer: status, body and its other header lines, already encoded.

    ``Content-Length``, ``Date`` and ``Connection`` are the protocol's to add."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int = 200, body: bytes = b"", headers: bytes = b"") -> None:
        self.status = status
        self.body = body
        self.headers = headers

    def with_header(self, name: str, value: str) -> Response:
        """A copy with one more header (the static answers are shared)."""
        return Response(self.status, self.body, self.headers + header_lines({name: value}))


def header_lines(headers: Mapping[str, str]) -> bytes:
    """``Name: value\\r\\n`` lines; names and values must be Latin-1 without CR or LF."""
    lines = []
    for name, value in headers.items():
        if any(c in name + value for c in "\r\n"):
            raise ValueError(f"header {name!r} holds a line break")
        lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    return b"".join(lines)


JSON = header_lines({"Content-Type": "application/json"})


def text(status: int, body: str, headers: Mapping[str, str] | None = None) -> Response:
    """A plain-text answer (a refusal naming its reason)."""
    extra = {"Content-Type": "text/plain; charset=utf-8", **(headers or {})}
    return Response(status, body.encode(), header_lines(extra))


def json(status: int, value: object) -> Response:
    return Response(status, orjson.dumps(value), JSON)


def html(body: str) -> Response:
    return Response(200, body.encode(), header_lines({"Content-Type": "text/html; charset=utf-8"}))


def status_line(status: int) -> bytes:
    return _STATUS_LINES.get(status) or _render_status_line(status)


def _render_status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


_STATUS_LINES = {s.value: _render_status_line(s.value) for s in HTTPStatus}
_NO_BODY = frozenset({204, 304})
"""Statuses that carry neither a body nor a Content-Length (RFC 9110 8.6)."""


class DateLine:
    """The ``Date:`` header line, rendered once a second."""

    __slots__ = ("_line", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._line = b""

    def __call__(self) -> bytes:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._line = b"Date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
        return self._line


def encode(response: Response, date: bytes, close: bool) -> bytes:
    """The answer's bytes on the wire."""
    parts = [status_line(response.status), date, response.headers]
    if response.status not in _NO_BODY:
        parts.append(b"Content-Length: %d\r\n" % len(response.body))
    parts.append(b"Connection: close\r\n\r\n" if close else b"\r\n")
    if response.status not in _NO_BODY:
        parts.append(response.body)
    return b"".join(parts)
