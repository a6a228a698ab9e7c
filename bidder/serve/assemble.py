"""Assemble a worker's ``BidderState`` from ``Settings``: every stage and its I/O.

The stages are listed here in the order they run (docs/architecture.md has the stage
table); this is the one place that says which adapter feeds each: the campaign book
(DynamoDB, refreshed) under eligibility, the supply files (files or S3, refreshed
hourly) under the supply chain, the profile cache over DynamoDB (never waits), the
pacer's leases read from Valkey every second, the frequency capper over one Valkey
round trip, the pricer over the LightGBM artifact (reloaded when it changes) and the
auction claims (Valkey SET NX). Caps and claims share one auto-pipelined connection on
a single Valkey server (``bidder.adapters.valkey_pipelined``); on a Cluster they use
redis-py clients. It also says which sinks the win path tells of a billed impression
(fcap counting, the pacer's lease debit). What must be loaded before the port opens is
loaded here (``bidder.serve._loads``); what keeps it fresh is returned as background
jobs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from functools import partial

from bidder.adapters.valkey import AsyncValkey, connect_async, connect_pipelined, warm_up
from bidder.adapters.valkey_pipelined import PipelinedConnection
from bidder.core import metrics
from bidder.core.clock import Clock
from bidder.core.published_metrics import flush, run_flusher
from bidder.core.tokens import TokenSigner, generate_key
from bidder.decide.consent import ConsentPolicy
from bidder.decide.eligibility import EligibilityPolicy
from bidder.decide.identity_graph import IdentityGraph
from bidder.decide.identity_table import CachedGraph
from bidder.decide.profile_cache import ProfileCache
from bidder.pipeline.auction_claims import AuctionClaims, EarlyClaimStage, SupplyDedupStage
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
from bidder.serve._loads import (
    WorkerStartError,
    campaign_book,
    deferred_journal,
    identity_placer,
    keep_model_fresh,
    ledger_producer,
    load_model,
    profile_cache,
    supply_cache,
)
from bidder.serve.app import BidderState, Closer, Job
from bidder.serve.region_settings import RegionConfig
from bidder.serve.settings import Settings
from bidder.supply.files import SupplyCache
from bidder.winloop.billing import Biller, ImpressionSink
from bidder.winloop.deferred import EXACT_REPLAY_ALLOWANCE_MS, DeferredJournal
from bidder.winloop.notices import MAX_SKEW_MS
from bidder.winloop.spend_stream import SpendProducer
from fcap import CountCache, FcapStore, FrequencyCapper, NegativeCache
from fcap import connect as fcap_connect
from fcap.regional import RegionalFcapStore
from ids.bid_ids import bid_id_source
from ids.snowflake import Snowflake
from ids.worker_lease import WorkerLease
from models.serving import Pricer
from pacing import NodePacer
from pacing.debits import DebitInbox, DebitOutbox
from pacing.lease_store import LeaseReader
from pacing.refresher import refresh_interval_s, return_leases, run_refresher

log = logging.getLogger(__name__)

_VALKEY_TIMEOUT_S = 0.5
_FIRST_LEASE_TIMEOUT_S = 5.0
_FCAP_START_TIMEOUT_S = 5.0
# Dedup keys outlive the notice window (plus the tolerated clock skew and a minute),
# so a duplicate inside the window always finds its key; and the replay allowance, so
# a deferred notice replayed a little after its window is still deduplicated exactly.
_DEDUP_SLACK_MS = MAX_SKEW_MS + 60_000 + EXACT_REPLAY_ALLOWANCE_MS


def pacing_node_id(pid: int) -> str:
    """The pacing node id of the worker process ``pid`` on this host."""
    return f"{socket.gethostname()}:{pid}"


async def build_state(settings: Settings, clock: Clock | None = None) -> BidderState:
    """Everything a worker decides with, loaded and ready before the port opens."""
    clock = clock or settings.clock()
    if settings.aws_endpoint is None:
        raise WorkerStartError("no AWS endpoint configured for the campaign store")
    if settings.valkey_url is None:
        raise WorkerStartError("no Valkey configured for caps, leases, ids and notice dedup")
    inputs = await _inputs(settings, settings.aws_endpoint, clock)
    stores = await _stores(settings, settings.valkey_url)
    pacer = NodePacer(pacing_node_id(os.getpid()), clock)
    generator, lease = await _leased_ids(settings, stores.valkey, clock)
    win = await _win_loop(
        settings, settings.aws_endpoint, clock, stores, inputs.book, pacer, generator
    )
    signer = _signer(settings)
    state = BidderState(
        settings=settings,
        book=inputs.book,
        stages=_stages(settings, inputs, stores, pacer, clock),
        clock=clock,
        notice_urls=NoticeUrls(
            settings.notice_base_url, signer, generator.next_id, clock, templates=inputs.book
        ),
        next_bid_id=bid_id_source(),
        signer=signer,
        biller=win.biller,
        ids=generator,
        impression_sinks=win.sinks,
        count_viewable=win.caps.on_viewable,
    )
    # The heartbeat is compared with the reconciler's wall clock: three ticks of it.
    heartbeat_ms = round(3 * settings.pacing_tick_s * 1000 * clock.speed)
    lease_reader = LeaseReader(stores.valkey, pacer.node_id, max(heartbeat_ms, 15_000))
    refresh_s = refresh_interval_s(settings.lease_refresh_s, settings.pacing_tick_s)
    inbox = DebitInbox(stores.valkey, lambda: generator.worker)
    state.background += [
        lease.keep,
        win.producer.run,
        partial(win.journal.run, win.biller.replay),
        partial(run_refresher, pacer, lease_reader, clock, refresh_s, inbox=inbox),
        *_refreshers(settings, inputs),
        partial(stores.capper.keep_counted_fresh, clock),
        partial(run_flusher, settings.metrics_flush_s),
    ]
    state.closers += [
        win.journal.close,
        win.producer.close,
        partial(return_leases, pacer, lease_reader, inbox=inbox),  # after the flush: see worker
        lease.release,
        inputs.profiles.close,
        *([inputs.identities.cache.close] if isinstance(inputs.identities, CachedGraph) else []),
        *stores.closers(),
        flush,  # last: what the closers counted too
    ]
    return state


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What the stages decide with, each loaded once before the port opens."""

    book: CampaignBook
    supply: SupplyCache
    pricer: Pricer
    profiles: ProfileCache
    identities: IdentityGraph | CachedGraph | None


async def _inputs(settings: Settings, endpoint: str, clock: Clock) -> _Inputs:
    book = await campaign_book(settings, endpoint)
    supply = await supply_cache(settings, endpoint)
    pricer = Pricer(load_model(settings), clock, shading=settings.bid_shading)
    identities = identity_placer(settings, endpoint, clock)
    return _Inputs(book, supply, pricer, profile_cache(settings, endpoint, clock), identities)


def _refreshers(settings: Settings, inputs: _Inputs) -> list[Job]:
    """The background jobs keeping the inputs fresh."""
    return [
        partial(inputs.book.keep_fresh, settings.campaign_refresh_s),
        partial(inputs.supply.keep_fresh, settings.supply_refresh_s),
        partial(keep_model_fresh, inputs.pricer, settings.model_reload_s),
    ]


@dataclass(frozen=True, slots=True)
class _Stores:
    """The Valkey clients: the shared one, the bid path's pipelined one (single server
    only) and the frequency capper's."""

    valkey: AsyncValkey
    pipelined: PipelinedConnection | None
    capper: FrequencyCapper

    def closers(self) -> list[Closer]:
        store = self.capper.store
        closers: list[Closer] = [self.valkey.aclose, store.client.aclose]
        if isinstance(store, RegionalFcapStore):
            closers += [c.aclose for c in store.clients.values() if c is not store.client]
        if self.pipelined is not None:
            closers.append(self.pipelined.aclose)
        return closers


async def _stores(settings: Settings, url: str) -> _Stores:
    valkey = connect_async(url, cluster=settings.valkey_cluster, timeout_s=_VALKEY_TIMEOUT_S)
    await _warm_up(valkey)
    pipelined = await _pipelined(settings, url)
    return _Stores(valkey, pipelined, await _capper(settings, url, pipelined))


def _stages(
    settings: Settings, inputs: _Inputs, stores: _Stores, pacer: NodePacer, clock: Clock
) -> list[Stage]:
    """The bid path's stages, in hot-path order (the module docstring)."""
    book = inputs.book
    stages: list[Stage] = [
        ConsentStage(ConsentPolicy(vendor_id=settings.tcf_vendor_id)),
        EligibilityStage(book, EligibilityPolicy(bid_on_test=settings.bid_on_test)),
        SupplyChainStage(inputs.supply),
        ProfileStage(
            inputs.profiles,
            miss_nobid=settings.profile_miss == "nobid",
            graph=inputs.identities,
        ),
        PacingStage(pacer),
    ]
    checked: list[Stage] = [FcapStage(stores.capper, book, clock), ScoreStage(inputs.pricer, book)]
    if settings.dedup_window_ms <= 0:
        return stages + checked
    dedup = _dedup_stage(settings, stores.pipelined or stores.valkey, inputs.supply, clock)
    # A Cluster's client sends only from a task, so there every claim is made at 8b.
    early: list[Stage] = [EarlyClaimStage(dedup)] if stores.pipelined is not None else []
    return stages + early + checked + [dedup]


@dataclass(frozen=True, slots=True)
class _WinLoop:
    """Where a billed impression goes: the ledger, the deferred journal, the sinks."""

    producer: SpendProducer
    journal: DeferredJournal
    sinks: list[ImpressionSink]
    biller: Biller
    caps: CapCounter


async def _win_loop(
    settings: Settings,
    endpoint: str,
    clock: Clock,
    stores: _Stores,
    book: CampaignBook,
    pacer: NodePacer,
    ids: Snowflake,
) -> _WinLoop:
    """The win path's parts; ``ids`` gives ledger ids and names this worker, whose
    leases pay for its own bids (``pacing.debits``)."""
    producer = await ledger_producer(settings, endpoint, clock)
    journal = await deferred_journal(settings, endpoint, clock)
    caps = CapCounter(stores.capper, book, clock)
    debit = LeaseDebit(pacer, lambda: ids.worker, DebitOutbox(stores.valkey))
    sinks: list[ImpressionSink] = [caps, debit]
    biller = Biller(
        stores.valkey,
        producer,
        ids.next_id,
        clock,
        sinks,
        dedup_ttl_ms=round(settings.notice_max_age_s * 1000) + _DEDUP_SLACK_MS,
        namespace=settings.key_namespace,
        deferred=journal,
    )
    return _WinLoop(producer, journal, sinks, biller, caps)


def _dedup_stage(
    settings: Settings,
    valkey: PipelinedConnection | AsyncValkey,
    supply: SupplyCache,
    clock: Clock,
) -> SupplyDedupStage:
    """Stage 8b: one claim per bidding copy of an auction (7a sends it early)."""
    claims = AuctionClaims(valkey, settings.key_namespace, settings.dedup_window_ms)
    hold_s, budget_s = settings.dedup_hold_ms / 1000, settings.dedup_claim_budget_ms / 1000
    return SupplyDedupStage(claims, settings.path_policy, supply, clock, hold_s, budget_s)


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
    store = (
        FcapStore(
            fcap_connect(
                url, cluster=settings.valkey_cluster, replica_reads=settings.fcap_replica_reads
            ),
            pipelined=pipelined,
            check_timeout_s=settings.fcap_check_timeout_ms / 1000,
        )
        if settings.region is None
        else _regional_store(settings, settings.region)
    )
    try:
        await store.start(timeout_s=_FCAP_START_TIMEOUT_S)
    except Exception as exc:  # Valkey down at start: serve, the cap policy decides per bid
        log.warning("frequency-cap scripts not loaded yet (loaded on first use): %s", exc)
    entries = settings.fcap_cache_entries
    return FrequencyCapper(
        store, NegativeCache(entries), fresh=CountCache(entries), workers=settings.workers
    )


def _regional_store(settings: Settings, region: RegionConfig) -> RegionalFcapStore:
    """``--region``: counters in the region's own store, merged with the others'."""
    clients = {name: fcap_connect(url) for name, url in region.stores}
    check_timeout_s = settings.fcap_check_timeout_ms / 1000
    return RegionalFcapStore(
        clients, region.name, home_reads=region.home_reads, check_timeout_s=check_timeout_s
    )


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


def _signer(settings: Settings) -> TokenSigner:
    active = settings.active_notice_key_id
    if active is None:
        log.warning(
            "no --notice-key: this worker signs notices with a random key; notices reaching "
            "another worker or a restarted one will be refused"
        )
        return TokenSigner({"dev": generate_key().encode()}, "dev")
    return TokenSigner({kid: secret.encode() for kid, secret in settings.notice_keys}, active)
