"""One bidder worker process: its own event loop, caches and (later) leases.

Workers share the bid port through SO_REUSEPORT, so the kernel spreads
connections across them and each is an independent "node". A worker reports
``("ready", pid)`` or ``("error", message)`` on its pipe once, ignores Ctrl-C
(the supervisor owns shutdown), stops gracefully on SIGTERM, and dies with the
supervisor if that is killed outright.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
from multiprocessing.connection import Connection

import uvloop
from aiohttp import web

from bidder.app import BidderState, build_app
from bidder.aws import aws_client
from bidder.campaign_book import CampaignBook
from bidder.campaign_store import CampaignTable
from bidder.clock import SystemClock
from bidder.eligibility import EligibilityPolicy
from bidder.pipeline import Stage
from bidder.settings import Settings
from bidder.stack import die_with_parent
from bidder.stages import EligibilityStage, PriceStage

_FIRST_LOAD_TIMEOUT_S = 20.0


class WorkerStartError(Exception):
    """The worker cannot serve; the message says what is missing."""


def run_worker(settings: Settings, parent_pid: int, conn: Connection) -> None:
    """Process entry point (multiprocessing, spawn)."""
    die_with_parent(parent_pid)()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        uvloop.run(_serve(settings, conn))
    except WorkerStartError as exc:
        conn.send(("error", str(exc)))
        raise SystemExit(3) from None


async def build_state(settings: Settings) -> BidderState:
    """Everything a worker decides with, loaded and ready before the port opens."""
    if settings.aws_endpoint is None:
        raise WorkerStartError("no AWS endpoint configured for the campaign store")
    client = aws_client("dynamodb", settings.aws_endpoint, settings.aws_region)
    table = CampaignTable(client, settings.campaigns_table)
    book = CampaignBook(table)
    try:
        await asyncio.wait_for(book.refresh(), _FIRST_LOAD_TIMEOUT_S)
    except Exception as exc:
        raise WorkerStartError(
            f"cannot load campaigns from {settings.aws_endpoint}: {exc}"
        ) from exc
    stages: list[Stage] = [
        EligibilityStage(book, EligibilityPolicy(bid_on_test=settings.bid_on_test)),
        PriceStage(),
    ]
    return BidderState(settings=settings, book=book, stages=stages, clock=SystemClock())


async def start_site(state: BidderState) -> web.AppRunner:
    """Open the bid port for ``state``; the caller cleans the runner up."""
    settings = state.settings
    # No access log: it would cost more than the whole no-bid path. Gzip is decoded
    # by bidder.body, within the body cap.
    runner = web.AppRunner(build_app(state), access_log=None, auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_port=True, backlog=4096)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise WorkerStartError(f"cannot listen on {settings.host}:{settings.port}: {exc}") from exc
    return runner


async def _serve(settings: Settings, conn: Connection) -> None:
    state = await build_state(settings)
    runner = await start_site(state)
    # Everything loaded so far lives as long as the worker. Freezing it keeps the
    # garbage collector from rescanning it: without this a full collection over the
    # start-up heap (boto3, botocore, aiohttp) stalled requests for ~30 ms.
    gc.collect()
    gc.freeze()
    refresher = asyncio.create_task(state.book.keep_fresh(settings.campaign_refresh_s))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    conn.send(("ready", os.getpid()))
    await stop.wait()
    refresher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await refresher
    await runner.cleanup()
