"""Reading the admin port's counters waits for the workers' publication stamp, not a sleep."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from aiohttp import web

from bidder.core.published_metrics import PUBLISHED_NAME
from bidder.replay import admin_metrics
from bidder.replay.admin_metrics import samples

FLUSH_S = 0.01


def _app(stamp: Callable[[int], float | None]) -> tuple[web.Application, list[int]]:
    """An admin port whose n-th read (from 0) shows ``stamp(n)`` and ``bidsim_bids_total n``."""
    reads: list[int] = []

    async def metrics(request: web.Request) -> web.Response:
        n = len(reads)
        reads.append(n)
        lines = ["# TYPE bidsim_bids_total counter", f"bidsim_bids_total {n}"]
        value = stamp(n)
        if value is not None:
            lines += [f"# TYPE {PUBLISHED_NAME} gauge", f"{PUBLISHED_NAME} {value!r}"]
        return web.Response(text="\n".join(lines) + "\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app, reads


def _bids(read: list) -> float:
    return next(sample.value for sample in read if sample.name == "bidsim_bids_total")


@pytest.mark.asyncio
async def test_a_read_waits_until_every_worker_has_published_after_it_was_asked(
    aiohttp_server,
) -> None:
    asked = time.time()
    # The stamp stays before the call for three reads (a descheduled worker), then passes it.
    app, reads = _app(lambda n: asked - 60.0 if n < 3 else time.time())
    server = await aiohttp_server(app)
    read = await samples(f"http://127.0.0.1:{server.port}", FLUSH_S)
    assert len(reads) == 4
    assert _bids(read) == 3  # the read that carried the fresh stamp, not an earlier one


@pytest.mark.asyncio
async def test_without_a_stamp_a_read_is_taken_after_two_flush_intervals(aiohttp_server) -> None:
    app, reads = _app(lambda n: None)
    server = await aiohttp_server(app)
    started = time.monotonic()
    read = await samples(f"http://127.0.0.1:{server.port}", FLUSH_S)
    assert time.monotonic() - started >= 2 * FLUSH_S  # a lower bound only: never a timed assert
    assert _bids(read) == len(reads) - 1


@pytest.mark.asyncio
async def test_a_worker_that_never_publishes_again_is_named_not_waited_for_forever(
    aiohttp_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_metrics, "SETTLE_TIMEOUT_S", 0.1)
    app, _ = _app(lambda n: time.time() - 3600.0)
    server = await aiohttp_server(app)
    with pytest.raises(TimeoutError, match="has not published its counts for 36"):
        await samples(f"http://127.0.0.1:{server.port}", FLUSH_S)
