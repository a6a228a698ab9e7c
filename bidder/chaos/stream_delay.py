"""A delaying proxy in front of moto: the spend stream's delivery held back.

The reconciler is started with this proxy as its AWS endpoint; every call passes
through to moto unchanged (DynamoDB and Kinesis alike) until ``hold()``. From then
on, a Kinesis ``GetRecords`` answer delivers only the records that arrived in the
stream before the hold began: the rest stay in moto, undelivered, and the answer's
``NextShardIterator`` points at the first of them, so the consumer reads them once
``release()`` lets them through. Its ``MillisBehindLatest`` is the time since the hold
began (the consumer's view of the stream is that old). Producers, DynamoDB and
Valkey are untouched: only delivery to the consumer lags.

The server runs on its own thread and event loop, so a scenario's replay loop does
not carry its traffic.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

_DROPPED = frozenset({"host", "content-length", "transfer-encoding", "connection"})


class StreamDelay:
    def __init__(self, upstream: str) -> None:
        self._upstream = upstream.rstrip("/")
        # Bound here, port 0: no other process can take the port before the server runs.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self._since: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-delay", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hold(self) -> None:
        """Deliver nothing that arrives in the stream from now on."""
        self._since = time.time()

    def release(self) -> None:
        self._since = None

    def __enter__(self) -> StreamDelay:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the stream delay proxy did not start")
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.SockSite(runner, self._socket).start()
        async with aiohttp.ClientSession() as self._session:
            self._ready.set()
            await self._stop.wait()
        await runner.cleanup()

    async def _forward(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        status, kind, payload = await self._call(request.method, request.path_qs, headers, body)
        since = self._since
        if since is not None and status == 200 and _is_get_records(headers):
            payload = await self._delayed(request.path_qs, headers, body, payload, since)
        return web.Response(status=status, body=payload, headers={"Content-Type": kind})

    async def _call(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, str, bytes]:
        url = self._upstream + path
        async with self._session.request(method, url, headers=headers, data=body) as resp:
            kind = resp.headers.get("Content-Type", "application/octet-stream")
            return resp.status, kind, await resp.read()

    async def _delayed(
        self, path: str, headers: dict[str, str], body: bytes, payload: bytes, since: float
    ) -> bytes:
        """The answer with only the records that arrived before ``since``."""
        doc: dict[str, Any] = orjson.loads(payload)
        records = doc["Records"]
        kept = next(
            (i for i, r in enumerate(records) if r["ApproximateArrivalTimestamp"] >= since),
            len(records),
        )
        if kept == len(records):
            return payload
        asked = orjson.loads(body)
        if kept == 0:
            doc = {"Records": [], "NextShardIterator": asked["ShardIterator"]}
        else:  # the same read, stopped at the last record delivered
            again = orjson.dumps({**asked, "Limit": kept})
            doc = orjson.loads((await self._call("POST", path, headers, again))[2])
        doc["MillisBehindLatest"] = max(1, round((time.time() - since) * 1000))
        return orjson.dumps(doc)


def _is_get_records(headers: dict[str, str]) -> bool:
    target = next((v for k, v in headers.items() if k.lower() == "x-amz-target"), "")
    return target.endswith(".GetRecords")
