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
import logging
import os
import signal
from multiprocessing.connection import Connection

import redis.asyncio as aioredis
import uvloop
from aiohttp import web

from bidder import metrics
from bidder.app import BidderState, build_app
from bidder.archive import LedgerArchive
from bidder.aws import aws_client
from bidder.billing import Biller, ImpressionSink
from bidder.campaign_book import CampaignBook
from bidder.campaign_store import CampaignTable
from bidder.clock import Clock, SystemClock
from bidder.eligibility import EligibilityPolicy
from bidder.notices import MAX_SKEW_MS
from bidder.pipeline import Stage
from bidder.response import NoticeUrls
from bidder.settings import Settings
from bidder.spend_stream import KinesisStream, SpendProducer, default_spool_dir
from bidder.spool import Spool
from bidder.stack import die_with_parent
from bidder.stages import EligibilityStage, PriceStage
from bidder.tokens import TokenSigner, generate_key
from ids.bid_ids import bid_id_source
from ids.snowflake import Snowflake
from ids.worker_lease import WorkerLease

log = logging.getLogger(__name__)

_FIRST_LOAD_TIMEOUT_S = 20.0
_VALKEY_TIMEOUT_S = 0.5
_FIRST_LEASE_TIMEOUT_S = 5.0
# Dedup keys outlive the notice window (plus the tolerated clock skew and a minute),
# so a duplicate inside the window always finds its key.
_DEDUP_SLACK_MS = MAX_SKEW_MS + 60_000


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
    clock = SystemClock()
    if settings.valkey_url is None:
        raise WorkerStartError("no Valkey configured for id leases and notice dedup")
    valkey = aioredis.Redis.from_url(
        settings.valkey_url,
        socket_timeout=_VALKEY_TIMEOUT_S,
        socket_connect_timeout=_VALKEY_TIMEOUT_S,
    )
    generator, lease = await _leased_ids(settings, valkey, clock)
    producer = await _ledger_producer(settings, clock)
    signer = _signer(settings)
    sinks: list[ImpressionSink] = []  # the biller calls whatever the state's list holds
    biller = Biller(
        valkey,
        producer,
        generator.next_id,
        clock,
        sinks,
        dedup_ttl_ms=round(settings.notice_max_age_s * 1000) + _DEDUP_SLACK_MS,
        namespace=settings.key_namespace,
    )
    state = BidderState(
        settings=settings,
        book=book,
        stages=stages,
        clock=clock,
        notice_urls=NoticeUrls(settings.notice_base_url, signer, generator.next_id, clock),
        next_bid_id=bid_id_source(),
        signer=signer,
        biller=biller,
        ids=generator,
        impression_sinks=sinks,
    )
    state.background += [lease.keep, producer.run]
    state.closers += [producer.close, lease.release, valkey.aclose]
    return state


async def _leased_ids(
    settings: Settings, valkey: aioredis.Redis, clock: Clock
) -> tuple[Snowflake, WorkerLease]:
    generator = Snowflake(
        clock, max_backwards_ms=settings.id_max_backwards_ms, on_backwards=_count_backwards
    )
    ttl_ms = round(settings.id_lease_ttl_s * 1000)
    lease = WorkerLease(
        valkey,
        generator,
        clock,
        namespace=settings.key_namespace,
        ttl_ms=ttl_ms,
        margin_ms=ttl_ms // 5,
        on_lost=metrics.ID_LEASE_LOSSES.inc,
    )
    try:
        await asyncio.wait_for(lease.acquire(), _FIRST_LEASE_TIMEOUT_S)
    except Exception as exc:  # Valkey down or no free id: serve, and keep trying
        log.warning("no Snowflake worker id yet (bids are 204 until leased): %s", exc)
    return generator, lease


def _count_backwards(refused: bool) -> None:
    metrics.CLOCK_BACKWARDS.labels("refused" if refused else "tolerated").inc()


async def _ledger_producer(settings: Settings, clock: Clock) -> SpendProducer:
    endpoint = settings.aws_endpoint
    spool_dir = settings.spool_dir or default_spool_dir(settings.spend_stream, endpoint)
    if endpoint is None:  # checked by build_state already; keeps the types honest
        raise WorkerStartError("no AWS endpoint configured for the spend stream")
    stream = KinesisStream(
        aws_client("kinesis", endpoint, settings.aws_region), settings.spend_stream
    )
    archive = LedgerArchive(
        aws_client("s3", endpoint, settings.aws_region),
        settings.archive_bucket,
        settings.archive_retention_days,
    )
    try:
        producer = SpendProducer(Spool(spool_dir), stream, archive, clock)
        await producer.open()
    except OSError as exc:
        raise WorkerStartError(f"cannot open the ledger spool in {spool_dir}: {exc}") from exc
    return producer


def _signer(settings: Settings) -> TokenSigner:
    active = settings.active_notice_key_id
    if active is None:
        log.warning(
            "no --notice-key: this worker signs notices with a random key; notices reaching "
            "another worker or a restarted one will be refused"
        )
        return TokenSigner({"dev": generate_key().encode()}, "dev")
    return TokenSigner({kid: secret.encode() for kid, secret in settings.notice_keys}, active)


async def start_background(state: BidderState) -> list[asyncio.Task[None]]:
    """Start the state's background jobs (id lease renewal, ledger shipping)."""
    return [asyncio.create_task(job()) for job in state.background]


async def stop_background(state: BidderState, tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the jobs, then close what they used (flush the ledger, release the id)."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for close in state.closers:
        try:
            await close()
        except Exception as exc:  # shutting down: report and go on closing the rest
            log.warning("error while closing %s: %s", getattr(close, "__qualname__", close), exc)


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
    background = await start_background(state)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    conn.send(("ready", os.getpid()))
    await stop.wait()
    refresher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await refresher
    await runner.cleanup()
    await stop_background(state, background)
