"""A worker's first loads: campaigns, supply files, model, profile cache, ledger spool,
deferred journal. Each is ready before the port opens, or start-up fails with a
``WorkerStartError`` naming what is missing."""

from __future__ import annotations

import asyncio
import logging

from bidder.adapters.aws import aws_client
from bidder.adapters.campaign_store import CampaignTable
from bidder.core.clock import Clock
from bidder.decide.identity_graph import IdentityGraph, load_graph
from bidder.decide.identity_table import (
    IDENTITY_METRICS,
    MAX_USER_KEYS,
    CachedGraph,
    Entry,
    IdentityTable,
)
from bidder.decide.profile_cache import (
    PROFILE_BATCH_WINDOW_S,
    CacheConfig,
    FillCache,
    ProfileCache,
)
from bidder.decide.profiles import ProfileTable
from bidder.pipeline.campaign_book import CampaignBook
from bidder.serve.settings import Settings
from bidder.supply.files import DirectorySource, S3Source, SupplyCache, SupplySource
from bidder.winloop.archive import LedgerArchive
from bidder.winloop.deferred import DeferredJournal
from bidder.winloop.spend_stream import (
    KinesisStream,
    SpendProducer,
    default_spool_dir,
    deferred_dir,
)
from bidder.winloop.spool import Spool
from models.scorer import ArtifactError, ModelHandle
from models.serving import Pricer

log = logging.getLogger(__name__)

_FIRST_LOAD_TIMEOUT_S = 20.0


class WorkerStartError(Exception):
    """The worker cannot serve; the message says what is missing."""


async def campaign_book(settings: Settings, endpoint: str) -> CampaignBook:
    table = CampaignTable(
        aws_client("dynamodb", endpoint, settings.aws_region), settings.campaigns_table
    )
    book = CampaignBook(table)
    try:
        await asyncio.wait_for(book.refresh(), _FIRST_LOAD_TIMEOUT_S)
    except Exception as exc:
        raise WorkerStartError(f"cannot load campaigns from {endpoint}: {exc}") from exc
    return book


async def supply_cache(settings: Settings, endpoint: str) -> SupplyCache:
    source: SupplySource
    if settings.supply_s3 is not None:
        bucket, _, prefix = settings.supply_s3.removeprefix("s3://").partition("/")
        source = S3Source(aws_client("s3", endpoint, settings.aws_region), bucket, prefix)
    elif settings.supply_dir is not None:
        source = DirectorySource(settings.supply_dir)
    else:
        raise WorkerStartError("no supply files: give --supply-dir or --supply-s3")
    cache = SupplyCache(source)
    try:
        await asyncio.wait_for(cache.refresh(), _FIRST_LOAD_TIMEOUT_S)
    except Exception as exc:
        raise WorkerStartError(f"cannot load the supply files: {exc}") from exc
    return cache


def load_model(settings: Settings) -> ModelHandle:
    try:
        return ModelHandle.load(settings.model_dir)
    except ArtifactError as exc:
        raise WorkerStartError(str(exc)) from exc


async def keep_model_fresh(pricer: Pricer, interval_s: float) -> None:
    """Swap in a new artifact when its files change; a bad one keeps the old model."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            if await asyncio.to_thread(pricer.model.reload_if_changed):
                log.info("model artifact reloaded")
        except ArtifactError as exc:
            log.error("new model artifact refused, keeping the current one: %s", exc)


def profile_cache(settings: Settings, endpoint: str, clock: Clock) -> ProfileCache:
    client = aws_client("dynamodb", endpoint, settings.aws_region, quick=True)
    table = ProfileTable(client, settings.profiles_table)
    config = CacheConfig(
        ttl_s=settings.profile_ttl_s,
        capacity=settings.profile_cache_size,
        batch_window_s=PROFILE_BATCH_WINDOW_S,
    )
    return ProfileCache(table.get_many, clock, config)


def identity_placer(
    settings: Settings, endpoint: str, clock: Clock
) -> IdentityGraph | CachedGraph | None:
    """Where stage 5 places user keys: the graph file held whole, the table through a
    cache, or nowhere (caps count ids)."""
    if settings.identity_graph is not None:
        return load_graph(settings.identity_graph)
    if settings.identity_table is None:
        return None
    client = aws_client("dynamodb", endpoint, settings.aws_region, quick=True)
    table = IdentityTable(client, settings.identity_table)
    ttl = settings.identity_ttl_s  # absent keys too: a new version may add them
    config = CacheConfig(
        ttl_s=ttl, absent_ttl_s=ttl, capacity=settings.profile_cache_size, max_batch=MAX_USER_KEYS
    )
    return CachedGraph(FillCache[Entry](table.get_many, clock, config, IDENTITY_METRICS))


async def ledger_producer(settings: Settings, endpoint: str, clock: Clock) -> SpendProducer:
    spool_dir = settings.spool_dir or default_spool_dir(settings.spend_stream, endpoint)
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


async def deferred_journal(settings: Settings, endpoint: str, clock: Clock) -> DeferredJournal:
    spool_dir = settings.spool_dir or default_spool_dir(settings.spend_stream, endpoint)
    directory = deferred_dir(spool_dir)
    try:
        journal = DeferredJournal(directory, clock)
        await journal.open()
    except OSError as exc:
        raise WorkerStartError(
            f"cannot open the deferred-notice journal in {directory}: {exc}"
        ) from exc
    return journal
