"""The supervised service: worker processes on one port, the admin port, start-up errors."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import socket

import aiohttp
import pytest

from bidder.serve.server import PrepareError, running_bidder
from bidder.serve.settings import Settings
from bidder.serve.workers import WorkerPoolError
from bidder.stack.child import free_port, held_port
from tests.bidder.conftest import EXTERNAL

pytestmark = pytest.mark.long(15)

SIMPLE_BANNER = (EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json").read_bytes()


def _fresh(settings: Settings, **changes: object) -> Settings:
    return settings.replace(port=held_port(), admin_port=0, **changes)


async def _post_many(url: str, count: int) -> list[int]:
    # A new connection per request so the kernel spreads them over the workers.
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        statuses = []
        for _ in range(count):
            async with session.post(url, data=SIMPLE_BANNER) as resp:
                statuses.append(resp.status)
        return statuses


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def _published(
    session: aiohttp.ClientSession, admin_url: str, expected: dict[str, float]
) -> str:
    """``/metrics`` once every name in ``expected`` shows its value, or as it is after a
    bounded number of reads. Each worker publishes every flush interval, one metric after
    another, and a read can fall inside a flush, so each name is waited for."""
    for _ in range(100):
        async with session.get(f"{admin_url}/metrics") as resp:
            text = await resp.text()
        if all(name in text and _metric(text, name) >= value for name, value in expected.items()):
            break
        await asyncio.sleep(0.05)
    return text


@pytest.mark.asyncio
async def test_two_workers_serve_one_port_and_the_admin_port_sums_their_metrics(
    bidder_settings: Settings,
) -> None:
    settings = _fresh(bidder_settings, workers=2)
    async with running_bidder(settings) as bidder:
        assert bidder.pool.alive() == 2
        statuses = await _post_many(f"{bidder.bid_url}/openrtb2/bid", 60)
        async with aiohttp.ClientSession() as session:
            metrics = await _published(
                session,
                bidder.admin_url,
                {"bidsim_bids_total": 60, "bidsim_bid_latency_seconds_count": 60},
            )
            async with session.get(f"{bidder.admin_url}/healthz") as resp:
                health = (resp.status, await resp.json())
    assert statuses == [200] * 60
    assert _metric(metrics, "bidsim_bid_latency_seconds_count") == 60
    assert _metric(metrics, "bidsim_bids_total") == 60
    assert _metric(metrics, "bidsim_workers_alive") == 2  # the supervisor's own metrics
    assert health == (200, {"status": "ok", "workers": 2, "workers_alive": 2, "valkey": "ok"})


@pytest.mark.asyncio
async def test_the_reconcilers_first_tick_leases_to_every_worker(bidder_settings: Settings) -> None:
    """The reconciler ticks as it starts and is started once the workers have registered,
    so the bidder is ready (every worker holds leases) long before a second tick could
    have come: with a 60 s tick, within 30 s."""
    settings = _fresh(bidder_settings, workers=2, pacing_tick_s=60.0)
    async with contextlib.AsyncExitStack() as stack:
        async with asyncio.timeout(30):
            bidder = await stack.enter_async_context(running_bidder(settings))
        statuses = await _post_many(f"{bidder.bid_url}/openrtb2/bid", 10)
    assert statuses == [200] * 10


@pytest.mark.asyncio
async def test_health_is_degraded_when_valkey_does_not_answer(bidder_settings: Settings) -> None:
    settings = _fresh(bidder_settings, valkey_url=f"redis://127.0.0.1:{held_port()}")
    async with (
        running_bidder(settings) as bidder,
        aiohttp.ClientSession() as session,
        session.get(f"{bidder.admin_url}/healthz") as resp,
    ):
        assert (resp.status, (await resp.json())["valkey"]) == (503, "down")


@pytest.mark.asyncio
async def test_stopping_ends_every_worker(bidder_settings: Settings) -> None:
    settings = _fresh(bidder_settings, workers=2)
    async with running_bidder(settings) as bidder:
        pool = bidder.pool
    assert pool.alive() == 0


@pytest.mark.asyncio
async def test_a_worker_that_cannot_listen_fails_start_up_with_the_reason(
    bidder_settings: Settings,
) -> None:
    settings = _fresh(bidder_settings).replace(port=free_port())
    # A plain (non-SO_REUSEPORT) listener makes the port unusable for the workers.
    with socket.socket() as blocker:
        blocker.bind((settings.host, settings.port))
        blocker.listen()
        with pytest.raises(WorkerPoolError, match="cannot listen"):
            async with running_bidder(settings):
                pass


@pytest.mark.asyncio
async def test_a_bidder_without_a_reachable_aws_endpoint_fails_start_up(
    bidder_settings: Settings,
) -> None:
    settings = _fresh(
        bidder_settings, campaigns_path=None, aws_endpoint=f"http://127.0.0.1:{held_port()}"
    )
    with pytest.raises(PrepareError, match="cannot prepare AWS resources"):
        async with running_bidder(settings):
            await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_a_stop_during_start_up_leaves_no_worker_running(bidder_settings: Settings) -> None:
    settings = _fresh(bidder_settings, workers=2)

    async def serve() -> None:
        async with running_bidder(settings):
            raise AssertionError("stopped before serving, so never here")

    starting = asyncio.create_task(serve())
    # The workers take about a second to import: the stop comes while the pool waits
    # for them (or, on a fast machine, during the wait for their leases).
    for _ in range(3000):  # until the pool has spawned them (at most 30 s)
        if multiprocessing.active_children():
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert multiprocessing.active_children() == []
