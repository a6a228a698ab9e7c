"""Routes that show what the server handed them, and requests to send them."""

from __future__ import annotations

import asyncio
import time

from bidder.core.futures import Later, Outcome
from bidder.serve.http.messages import Request, Response
from bidder.serve.http.protocol import Route
from bidder.serve.http.server import HttpServer

CAP = 1024


class App:
    """Routes that echo what they saw; ``/wait`` and ``/later`` answer when ``release`` is
    set."""

    def __init__(self) -> None:
        self.seen: list[Request] = []
        self.release = asyncio.Event()
        self._held: list[asyncio.Future[bool]] = []

    def echo(self, request: Request) -> Response:
        self.seen.append(request)
        over = b" over-cap" if request.over_cap else b""
        return Response(200, request.method.encode() + b" " + request.body + over)

    async def wait(self, request: Request) -> Response:
        self.seen.append(request)
        await self.release.wait()
        return Response(200, b"waited")

    def later(self, request: Request) -> Later[Response]:
        """``wait``'s answer given from a done-callback, as the bid handler gives one."""
        self.seen.append(request)
        released = asyncio.ensure_future(self.release.wait())
        self._held.append(released)
        return Later(released, lambda _: Response(200, b"waited"))

    def boom(self, request: Request) -> Response:
        raise RuntimeError("a bug")

    def boom_later(self, request: Request) -> Later[Response]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return Later(done, self._bug)

    def _bug(self, _: Outcome[None]) -> Response:
        raise RuntimeError("a bug")

    def late(self, received: float) -> Response:
        return Response(204, headers=b"X-Late: 1\r\n")

    def server(self) -> HttpServer:
        routes = {
            ("POST", "/echo"): Route(self.echo),
            ("GET", "/echo"): Route(self.echo),
            ("GET", "/wait"): Route(self.wait),
            ("GET", "/later"): Route(self.later),
            ("GET", "/boom"): Route(self.boom),
            ("GET", "/boom-later"): Route(self.boom_later),
            ("POST", "/quick"): Route(self.echo, arrive_within_s=0.05, late=self.late),
        }
        return HttpServer(routes, now=time.monotonic, max_body_bytes=CAP)


def post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def get(path: str, *extra: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", "Host: x", *extra]) + "\r\n\r\n").encode()
