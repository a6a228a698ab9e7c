"""The exchange's side of the notice path, recorded: forwards each notice, keeps URL and answer.

A bidder started with ``public_url`` pointing here signs its nurl/burl for this
server; the replay's exchange model calls them, and the recorder forwards each call to
the bidder (``target``) and keeps the path with its query (the signed token is the
``t`` parameter), the bidder's status and when its answer arrived. Audits use the
tokens: their claims name the user, household, campaign, creative and bid instant of
each impression (``fcap.audit.claims_from_notice_urls``); the answer times bound when
each impression was counted (``fcap.audit.counted_times``).

    recorder = NoticeRecorder()                 # picks a free loopback port
    settings = ...(public_url=recorder.public_url)
    recorder.target = bid_url                   # once the bidder's address is known
    async with recorder:                        # serves until the block ends
        ...
"""

from __future__ import annotations

import time
from collections import Counter
from typing import NamedTuple
from urllib.parse import parse_qs

import aiohttp
from aiohttp import web

from bidder.stack.child import free_port


class RecordedNotice(NamedTuple):
    path_qs: str
    """The notice's path with its query."""
    status: int
    """The bidder's answer."""
    answered_ms: int
    """When the answer arrived, on the wall clock (the bidder's, on one machine)."""


class NoticeRecorder:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host, self.port, self.target = host, free_port(), ""
        self.answers: list[RecordedNotice] = []
        """Every notice forwarded, in the order the bidder answered them."""
        self._runner: web.AppRunner | None = None

    @property
    def public_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def statuses(self) -> Counter[int]:
        return Counter(answer.status for answer in self.answers)

    def tokens(self, status: int | None = None) -> list[str]:
        """The notice tokens forwarded (only those the bidder answered ``status``)."""
        return [
            token
            for answer in self.answers
            if status is None or answer.status == status
            for token in parse_qs(answer.path_qs.partition("?")[2]).get("t", [])
        ]

    async def __aenter__(self) -> NoticeRecorder:
        app = web.Application()
        app.router.add_get("/notice/{kind}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.Response:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.target + request.path_qs) as resp,
        ):
            body = await resp.read()
            answered_ms = time.time_ns() // 1_000_000
        self.answers.append(RecordedNotice(request.path_qs, resp.status, answered_ms))
        return web.Response(status=resp.status, body=body)
