"""Assemble a worker's ``BidderState`` from ``Settings``: every stage and its I/O.

One place says which adapter feeds which stage, in hot-path order:

    2 rate limit     RateLimiter, in the bid handler: on the X-Ssp header, before the body
    3 consent        ConsentPolicy (pure)  ->  eligibility: CampaignBook (DynamoDB, refreshed)
    4 supply chain   SupplyCache (files or S3, refreshed hourly)
    5 profile        ProfileCache over DynamoDB (never waits)
    6 pacing         NodePacer, leases read from Valkey every second
    7 frequency cap  FrequencyCapper over FcapStore (Valkey, one round trip)
    8 score          Pricer over the LightGBM artifact (reloaded when it changes)
    8b dedup         AuctionClaims (Valkey SET NX, bidding copies with a tid only)

(7 and 8b share one auto-pipelined connection on a single Valkey server,
``bidder.adapters.valkey_pipelined``; on a Cluster they use redis-py clients)

and which sinks the win path tells of a billed impression (fcap counting, the
pacer's lease debit). Everything that must be loaded before the port opens is
loaded here; what keeps it fresh is returned as background jobs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from bidder.adapters.aws import aws_client
from bidder.adapters.campaign_store import CampaignTable
from bidder.adapters.valkey import AsyncValkey, connect_async, connect_pipelined, warm_up
from bidder.adapters.valkey_pipelined import PipelinedConnection
from bidder.core import metrics
from bidder.core.clock import Clock, SystemClock
from bidder.core.published_metrics import flush, run_flusher
from bidder.core.tokens import TokenSigner, generate_key
from bidder.decide.consent import ConsentPolicy
from bidder.decide.eligibility import EligibilityPolicy
from bidder.decide.profile_cache import CacheConfig, ProfileCache
from bidder.decide.profiles import ProfileTable
from bidder.pipeline.auction_claims import AuctionClaims, SupplyDedupStage
from bidder.pipeline.campaign_book import CampaignBook
from bidder.pipeline.response import NoticeUrls
from bidder.pipeline.runner import Stage
from bidder.pipeline.sinks import CapCounter, LeaseDebit
from bidder.pipeline.stages import (
    ConsentStage,
    EligibilityStage,
    FcapStage,
    PacingStage,
    ProfileStage,
    ScoreStage,
    SupplyChainStage,
)
from bidder.serve.app import BidderState
from bidder.serve.settings import Settings
from bidder.supply.files import DirectorySource, S3Source, SupplyCache, SupplySource
from bidder.winloop.archive import LedgerArchive
from bidder.winloop.billing import Biller, ImpressionSink
from bidder.winloop.deferred import EXACT_REPLAY_ALLOWANCE_MS, DeferredJournal
from bidder.winloop.notices import MAX_SKEW_MS
from bidder.winloop.spend_stream import KinesisStream, SpendProducer, default_spool_dir
from bidder.winloop.spool import Spool
from fcap import FcapStore, FrequencyCapper, NegativeCache
from fcap import connect as fcap_connect
from ids.bid_ids import bid_id_source
from ids.snowflake import Snowflake
from ids.worker_lease import WorkerLease
from models.scorer import ArtifactError, ModelHandle
from models.serving import Pricer
from pacing import LeaseReader, NodePacer
from pacing.refresher import return_leases, run_refresher

log = logging.getLogger(__name__)

_FIRST_LOAD_TIMEOUT_S = 20.0
_VALKEY_TIMEOUT_S = 0.5
_FIRST_LEASE_TIMEOUT_S = 5.0
_FCAP_START_TIMEOUT_S = 5.0
# Dedup keys outlive the notice window (plus the tolerated clock skew and a minute),
# so a duplicate inside the window always finds its key; and the replay allowance, so
# a deferred notice replayed a little after its window is still deduplicated exactly.
_DEDUP_SLACK_MS = MAX_SKEW_MS + 60_000 + EXACT_REPLAY_ALLOWANCE_MS


class WorkerStartError(Exception):
    """The worker cannot serve; the message says what is missing."""


def pacing_node_id(pid: int) -> str:
    """The pacing node id of the worker process ``pid`` on this host."""
    return f"{socket.gethostname()}:{pid}"


async def build_state(settings: Settings, clock: Clock | None = None) -> BidderState:
    """Everything a worker decides with, loaded and ready before the port opens."""
    clock = clock or SystemClock()
    if settings.aws_endpoint is None:
        raise WorkerStartError("no AWS endpoint configured for the campaign store")
    if settings.valkey_url is None:
        raise WorkerStartError("no Valkey configured for caps, leases, ids and notice dedup")
    book = await _campaign_book(settings, settings.aws_endpoint)
    supply = await _supply_cache(settings, settings.aws_endpoint)
    pricer = Pricer(_model(settings), clock, shading=settings.bid_shading)
    profiles = _profile_cache(settings, settings.aws_endpoint, clock)
    valkey = connect_async(
        settings.valkey_url, cluster=settings.valkey_cluster, timeout_s=_VALKEY_TIMEOUT_S
    )
    await _warm_up(valkey)
    pipelined = await _pipelined(settings, settings.valkey_url)
    capper = await _capper(settings, settings.valkey_url, pipelined)
    pacer = NodePacer(pacing_node_id(os.getpid()), clock)
    lease_reader = LeaseReader(valkey, pacer.node_id)
    stages: list[Stage] = [
        ConsentStage(ConsentPolicy(vendor_id=settings.tcf_vendor_id)),
        EligibilityStage(book, EligibilityPolicy(bid_on_test=settings.bid_on_test)),
        SupplyChainStage(supply),
        ProfileStage(profiles, miss_nobid=settings.profile_miss == "nobid"),
        PacingStage(pacer),
        FcapStage(capper, book, clock),
        ScoreStage(pricer, book),
    ]
    if settings.dedup_window_ms > 0:
        stages.append(_dedup_stage(settings, pipelined or valkey, supply, clock))
    generator, lease = await _leased_ids(settings, valkey, clock)
    producer = await _ledger_producer(settings, settings.aws_endpoint, clock)
    journal = await _deferred_journal(settings, settings.aws_endpoint, clock)
    signer = _signer(settings)
    sinks: list[ImpressionSink] = [CapCounter(capper, book, clock), LeaseDebit(pacer)]
    biller = Biller(
        valkey,
        producer,
        generator.next_id,
        clock,
        sinks,
        dedup_ttl_ms=round(settings.notice_max_age_s * 1000) + _DEDUP_SLACK_MS,
        namespace=settings.key_namespace,
        deferred=journal,
    )
    state = BidderState(
        settings=settings,
        book=book,
        stages=stages,
        clock=clock,
        notice_urls=NoticeUrls(
            settings.notice_base_url, signer, generator.next_id, clock, templates=book
        ),
        next_bid_id=bid_id_source(),
        signer=signer,
        biller=biller,
        ids=generator,
        impression_sinks=sinks,
    )

    async def refresh_leases() -> None:
        await run_refresher(pacer, lease_reader, clock, settings.lease_refresh_s)

    async def refresh_campaigns() -> None:
        await book.keep_fresh(settings.campaign_refresh_s)

    async def refresh_supply() -> None:
        await supply.keep_fresh(settings.supply_refresh_s)

    async def reload_model() -> None:
        await _keep_model_fresh(pricer, settings.model_reload_s)

    async def close_profiles() -> None:
        profiles.close()

    async def replay_deferred() -> None:
        await journal.run(biller.replay)

    async def publish_metrics() -> None:
        await run_flusher(settings.metrics_flush_s)

    async def publish_last_metrics() -> None:  # what the closers counted too
        flush()

    async def return_pacing_leases() -> None:  # after the flush: see bidder.serve.worker
        await return_leases(pacer, lease_reader)

    state.background += [
        lease.keep,
        producer.run,
        replay_deferred,
        refresh_leases,
        refresh_campaigns,
        refresh_supply,
        reload_model,
        publish_metrics,
    ]
    state.closers += [
        journal.close,
        producer.close,
        return_pacing_leases,
        lease.release,
        close_profiles,
        valkey.aclose,
        capper.store.client.aclose,
    ]
    if pipelined is not None:
        state.closers.append(pipelined.aclose)
    state.closers.append(publish_last_metrics)
    return state


def _dedup_stage(
    settings: Settings,
    valkey: PipelinedConnection | AsyncValkey,
    supply: SupplyCache,
    clock: Clock,
) -> SupplyDedupStage:
    """Stage 8b: one claim per bidding copy of an auction."""
    claims = AuctionClaims(valkey, settings.key_namespace, settings.dedup_window_ms)
    hold_s, budget_s = settings.dedup_hold_ms / 1000, settings.dedup_claim_budget_ms / 1000
    return SupplyDedupStage(claims, settings.path_policy, supply, clock, hold_s, budget_s)


async def _campaign_book(settings: Settings, endpoint: str) -> CampaignBook:
    table = CampaignTable(
        aws_client("dynamodb", endpoint, settings.aws_region), settings.campaigns_table
    )
    book = CampaignBook(table)
    try:
        await asyncio.wait_for(book.refresh(), _FIRST_LOAD_TIMEOUT_S)
    except Exception as exc:
        raise WorkerStartError(f"cannot load campaigns from {endpoint}: {exc}") from exc
    return book


async def _supply_cache(settings: Settings, endpoint: str) -> SupplyCache:
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


def _model(settings: Settings) -> ModelHandle:
    try:
        return ModelHandle.load(settings.model_dir)
    except ArtifactError as exc:
        raise WorkerStartError(str(exc)) from exc


async def _keep_model_fresh(pricer: Pricer, interval_s: float) -> None:
    """Swap in a new artifact when its files change; a bad one keeps the old model."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            if await asyncio.to_thread(pricer.model.reload_if_changed):
                log.info("model artifact reloaded")
        except ArtifactError as exc:
            log.error("new model artifact refused, keeping the current one: %s", exc)


def _profile_cache(settings: Settings, endpoint: str, clock: Clock) -> ProfileCache:
    client = aws_client("dynamodb", endpoint, settings.aws_region, quick=True)
    table = ProfileTable(client, settings.profiles_table)
    config = CacheConfig(ttl_s=settings.profile_ttl_s, capacity=settings.profile_cache_size)
    return ProfileCache(table.get_many, clock, config)


async def _pipelined(settings: Settings, url: str) -> PipelinedConnection | None:
    """The bid path's connection to a single server; None on a Cluster."""
    if settings.valkey_cluster:
        return None
    pipelined = connect_pipelined(url, connect_timeout_s=_VALKEY_TIMEOUT_S)
    try:
        await pipelined.connect()
    except Exception as exc:  # Valkey down at start: serve, it connects on demand
        log.warning("bid-path Valkey connection not up yet: %s", exc)
    return pipelined


async def _capper(
    settings: Settings, url: str, pipelined: PipelinedConnection | None
) -> FrequencyCapper:
    store = FcapStore(
        fcap_connect(
            url, cluster=settings.valkey_cluster, replica_reads=settings.fcap_replica_reads
        ),
        pipelined=pipelined,
        check_timeout_s=settings.fcap_check_timeout_ms / 1000,
    )
    try:
        await store.start(timeout_s=_FCAP_START_TIMEOUT_S)
    except Exception as exc:  # Valkey down at start: serve, the cap policy decides per bid
        log.warning("frequency-cap scripts not loaded yet (loaded on first use): %s", exc)
    return FrequencyCapper(store, NegativeCache(settings.fcap_cache_entries))


async def _warm_up(valkey: AsyncValkey) -> None:
    try:
        await warm_up(valkey, _FIRST_LEASE_TIMEOUT_S)
    except Exception as exc:  # Valkey down at start: serve; the map loads on first use
        log.warning("Valkey cluster slot map not loaded yet: %s", exc)


async def _leased_ids(
    settings: Settings, valkey: AsyncValkey, clock: Clock
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


async def _ledger_producer(settings: Settings, endpoint: str, clock: Clock) -> SpendProducer:
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


async def _deferred_journal(settings: Settings, endpoint: str, clock: Clock) -> DeferredJournal:
    spool_dir = settings.spool_dir or default_spool_dir(settings.spend_stream, endpoint)
    directory = spool_dir / "deferred"  # a subdirectory: the spool adopts only its own *.seg
    try:
        journal = DeferredJournal(directory, clock)
        await journal.open()
    except OSError as exc:
        raise WorkerStartError(
            f"cannot open the deferred-notice journal in {directory}: {exc}"
        ) from exc
    return journal


def _signer(settings: Settings) -> TokenSigner:
    active = settings.active_notice_key_id
    if active is None:
        log.warning(
            "no --notice-key: this worker signs notices with a random key; notices reaching "
            "another worker or a restarted one will be refused"
        )
        return TokenSigner({"dev": generate_key().encode()}, "dev")
    return TokenSigner({kid: secret.encode() for kid, secret in settings.notice_keys}, active)
