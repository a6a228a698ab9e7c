"""The reconciler service: Kinesis spend stream -> DynamoDB totals -> Valkey leases.

One tick (``Reconciler.tick``, every ``tick_s``, default 5 s):

1. read every shard of the spend stream from its checkpoint, shards in parallel
   threads (``pacing.spend_reader``); undecodable records are logged, counted and
   skipped;
2. apply the entries to the DynamoDB totals exactly once (``SpendTable.apply``);
3. read the day's campaign and advertiser totals, check that each advertiser's total
   is the sum of its campaigns' (a mismatch is logged, naming the advertiser, and
   counted in ``bidsim_pacing_advertiser_mismatches``);
4. if the read left the consumer further behind the stream's tip than the lag
   threshold, hold: no lease is written this tick (``pacing.stream_lag``; logged when
   the hold starts and ends, counted in ``bidsim_pacing_lag_held_ticks``), save the
   checkpoints and stop here;
5. read the live nodes and what departed nodes returned, run the pure tick
   (``pacing.reconcile``) with the spend read's watermark: the read's start less the
   lag and the producer's delay (``pacing.stream_lag.applied_through_ms``), before
   which every debit is applied;
6. write each live node's leases to Valkey; only then save the shard checkpoints;
7. log the applied returns and delete exactly the returned records this tick applied.

Returned records are looked for under every node leased to within the leases' lifetime
(a departed node is no longer in the live set). Applying one is idempotent in memory
(``LeaseBook.give_back`` remembers node and lease), so a tick that fails after applying
or a crash before the delete cannot take a remainder off twice; a restarted reconciler
has a fresh book that knows none of the old leases: it does not look for old records
(it has leased to no one yet), and they expire with their TTL.

A tick that fails anywhere writes no leases: the nodes' leases expire two ticks later
and spending stops (fail-closed); the next tick re-reads from the checkpoints and the
applied-id condition refuses whatever was applied already. The circuit breaker's trips
are logged and counted (``bidsim_pacing_breaker_trips``); invariant violations too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import orjson
from botocore.exceptions import BotoCoreError, ClientError
from prometheus_client import Counter, Gauge

from bidder.adapters.aws import aws_client
from bidder.adapters.campaign_store import CampaignTable, StoreError
from bidder.adapters.valkey import VALKEY_FAILURES, connect_sync
from bidder.core.campaign_docs import campaigns_from_docs
from bidder.core.campaigns import Campaign, CampaignError
from bidder.core.clock import Clock, SystemClock, real_ttl_ms
from bidder.core.ledger import LedgerEntry, LedgerFormatError, decode_entry
from pacing.curves import BUILTIN, Curve, CurveError, day_of
from pacing.lease import Lease, ReturnedLease, expiry_ms
from pacing.lease_store import WRITE_LEASES, LeaseWriter, write_args
from pacing.reconcile import (
    AdvertiserMismatch,
    Budget,
    PacingConfig,
    Reconcile,
    TickResult,
    advertiser_mismatches,
    budget_of,
    node_leases,
)
from pacing.spend_reader import KinesisReader
from pacing.spend_table import SpendStoreError, SpendTable
from pacing.stop_flag import Stop
from pacing.stream_lag import LagDecision, LagGate, applied_through_ms

log = logging.getLogger("bidsim.reconciler")

DEFAULT_STREAM = "bidsim-spend"
_VALKEY_TIMEOUT_S = 2.0
BREAKER_TRIPS = Counter(
    "bidsim_pacing_breaker_trips", "Campaigns paused by the pacing circuit breaker.", ["campaign"]
)
TICKS = Counter("bidsim_pacing_ticks", "Reconciler ticks by outcome.", ["outcome"])
INVARIANT_VIOLATIONS = Counter(
    "bidsim_pacing_invariant_violations", "Invariant checks that failed (spent + leased > budget)."
)
BAD_RECORDS = Counter(
    "bidsim_pacing_bad_records", "Spend stream records that are not ledger entries."
)
RETURNED = Counter(
    "bidsim_pacing_returned_micros",
    "Unspent lease remainders of departed nodes taken off the exposure.",
)
ADVERTISER_MISMATCHES = Counter(
    "bidsim_pacing_advertiser_mismatches",
    "Ticks on which an advertiser's spend total differed from the sum of its campaigns'.",
    ["advertiser"],
)
STREAM_LAG = Gauge(
    "bidsim_pacing_spend_stream_lag_seconds",
    "How far behind the spend stream's tip the reconciler's last read ended.",
    multiprocess_mode="livemax",
)
LAG_HELD_TICKS = Counter(
    "bidsim_pacing_lag_held_ticks",
    "Ticks that granted no lease because the spend stream lagged past the threshold.",
)


@dataclass
class TickReport:
    result: TickResult
    applied: list[LedgerEntry] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    bad_records: int = 0
    lag: LagDecision | None = None
    mismatches: list[AdvertiserMismatch] = field(default_factory=list)

    @property
    def held(self) -> bool:
        """No lease was granted: the spend stream lagged past the threshold."""
        return self.lag is not None and self.lag.hold


class Reconciler:
    """The I/O shell around ``pacing.reconcile.Reconcile``."""

    def __init__(
        self,
        reader: KinesisReader,
        table: SpendTable,
        leases: LeaseWriter,
        campaigns: Callable[[], Sequence[Campaign]],
        clock: Clock,
        config: PacingConfig | None = None,
        curves: dict[str, Curve] | None = None,
    ) -> None:
        self._reader = reader
        self._table = table
        self._leases = leases
        self._campaigns = campaigns
        self._clock = clock
        self.core = Reconcile(config)
        self._lag = LagGate(self.core.config.lag_threshold_ms)
        self._curves = {**BUILTIN, **(curves or {})}
        self._leased_to: dict[str, int] = {}
        """Node -> when its last lease expires: where returned records may appear."""

    def tick(self) -> TickReport:
        """One tick; raises SpendStoreError, one of ``VALKEY_FAILURES`` or a boto3 error on
        failure."""
        try:
            report = self._tick()
        except Exception:
            self._reader.forget_iterators()
            TICKS.labels("failed").inc()
            raise
        TICKS.labels("ok").inc()
        return report

    def _tick(self) -> TickReport:
        read_at = self._clock.wall_ms()
        raw = self._reader.read()
        lag = self._observe_lag(self._reader.lag_ms)
        entries, bad = _decode(raw)
        applied = self._table.apply(entries)
        now_ms = self._clock.wall_ms()
        budgets = self._budgets()
        spent = self._table.campaign_totals(day_of(now_ms), [b.campaign_id for b in budgets])
        mismatches = self._check_advertisers(day_of(now_ms), budgets, spent)
        if lag.hold:  # the leases out expire on their own: nothing unseen is granted
            self._reader.commit()
            LAG_HELD_TICKS.inc()
            return TickReport(TickResult(), applied, [], bad, lag, mismatches)
        nodes = self._leases.live_nodes(now_ms)
        returns = self._read_returns(now_ms, nodes)
        cfg = self.core.config
        speed = self._clock.speed  # the lag and the producer's delay are real time
        through = applied_through_ms(
            read_at, round(lag.lag_ms * speed), round(cfg.ledger_delay_s * 1000 * speed)
        )
        result = self.core.tick(now_ms, budgets, spent, len(nodes), returns, through)
        expires = expiry_ms(now_ms, cfg.tick_ms)
        ttl_ms = real_ttl_ms(expires - now_ms, self._clock)
        self._leases.write_each(node_leases(nodes, result.plans), ttl_ms)
        self._leased_to.update(dict.fromkeys(nodes, expires))
        self._reader.commit()
        self._settle_returns(now_ms, result)
        self._report(result)
        return TickReport(result, applied, nodes, bad, lag, mismatches)

    def _observe_lag(self, lag_ms: int) -> LagDecision:
        decision = self._lag.observe(lag_ms)
        STREAM_LAG.set(lag_ms / 1000)
        threshold_s = self._lag.threshold_ms / 1000
        if decision.started:
            log.warning(
                "pacing: spend stream %.1f s behind (threshold %g s): holding leases, "
                "none granted until it is at most %g s behind",
                lag_ms / 1000, threshold_s, threshold_s / 2,
            )  # fmt: skip
        elif decision.cleared:
            log.warning(
                "pacing: spend stream %.1f s behind: lag cleared, granting leases again",
                lag_ms / 1000,
            )
        return decision

    def _check_advertisers(
        self, day: int, budgets: Sequence[Budget], spent: Mapping[str, int]
    ) -> list[AdvertiserMismatch]:
        advertiser_of = {b.campaign_id: b.advertiser for b in budgets}
        totals = self._table.advertiser_totals(day, sorted(set(advertiser_of.values())))
        found = advertiser_mismatches(spent, advertiser_of, totals)
        for mismatch in found:
            ADVERTISER_MISMATCHES.labels(mismatch.advertiser).inc()
            log.error("pacing: advertiser totals disagree: %s", mismatch)
        return found

    def _read_returns(self, now_ms: int, live: Sequence[str]) -> list[ReturnedLease]:
        self._leased_to = {n: until for n, until in self._leased_to.items() if until > now_ms}
        return self._leases.read_returns(sorted(set(self._leased_to) | set(live)))

    def _settle_returns(self, now_ms: int, result: TickResult) -> None:
        """Log what was taken off (one entry per tick) and delete the records seen."""
        if not result.returns_seen:
            return
        records = [
            {"node": r.node, "campaign": r.campaign_id, "lease_id": r.lease_id,
             "micros": r.micros, "taken": taken, "exposure": plan.exposure_micros}
            for plan in result.plans
            for r, taken in plan.returned
        ]  # fmt: skip
        departed = sorted({item.node for item in result.returns_seen})
        entry = {"now_ms": now_ms, "nodes": departed, "records": records}
        taken = sum(p.returned_micros for p in result.plans)
        RETURNED.inc(taken)
        log.info("pacing: nodes %s returned leases; %d micros taken off", departed, taken)
        self._leases.settle_returns(result.returns_seen, [orjson.dumps(entry).decode()])

    def _budgets(self) -> list[Budget]:
        budgets = []
        for campaign in self._campaigns():
            try:
                budgets.append(budget_of(campaign, self._curves))
            except CurveError as exc:
                log.error("pacing: campaign %s gets no lease: %s", campaign.id, exc)
        return budgets

    def _report(self, result: TickResult) -> None:
        for campaign_id in result.tripped:
            BREAKER_TRIPS.labels(campaign_id).inc()
            log.warning(
                "pacing: circuit breaker paused campaign %s (spend above %gx target for %g s)",
                campaign_id,
                self.core.config.breaker_ratio,
                self.core.config.breaker_window_s,
            )
        for problem in result.violations:
            INVARIANT_VIOLATIONS.inc()
            log.error("pacing: invariant violated: %s", problem)


def _decode(raw: list[bytes]) -> tuple[list[LedgerEntry], int]:
    entries, bad = [], 0
    for data in raw:
        try:
            entries.append(decode_entry(data))
        except LedgerFormatError as exc:
            bad += 1
            BAD_RECORDS.inc()
            log.error("pacing: skipping a spend record that is not a ledger entry: %s", exc)
    return entries, bad


_TICK_ERRORS = (SpendStoreError, ClientError, BotoCoreError, *VALKEY_FAILURES)


def run_reconciler(
    reconciler: Reconciler,
    tick_s: float,
    stop: Stop,
    clock: Clock | None = None,
) -> None:
    """Tick every ``tick_s`` until ``stop`` is set; a failed tick is logged, not fatal."""
    clock = clock or SystemClock()
    next_at = clock.monotonic()
    while not stop.is_set():
        try:
            reconciler.tick()
            failed = False
        except _TICK_ERRORS as exc:
            log.error("pacing: reconciler tick failed, retrying soon: %s", exc)
            failed = True
        next_at = next_tick_at(next_at, clock.monotonic(), tick_s, failed)
        stop.wait(max(next_at - clock.monotonic(), 0.0))


RETRY_FRACTION = 0.25
"""A failed tick is retried after this share of a tick, not a whole one."""


def next_tick_at(scheduled: float, now: float, tick_s: float, failed: bool) -> float:
    """When to tick next, after the tick due at ``scheduled`` ran (until ``now``).

    On schedule, ticks keep their cadence and skip the ones we are behind on instead of
    bursting. A failed tick is retried a quarter tick later: leases live two ticks, so
    waiting a whole tick after a failure (a Valkey failover, a moto blip) lets every
    node's leases lapse just as the next tick writes new ones.
    """
    if failed:
        return now + RETRY_FRACTION * tick_s
    following = scheduled + tick_s
    late = now - following
    if late > 0:
        following += (late // tick_s + 1) * tick_s
    return following


class ClusterLeaseWriter(LeaseWriter):
    """``LeaseWriter`` for a Valkey Cluster: one script call per node, no pipeline.

    redis-py refuses scripts inside a cluster pipeline; the nodes' lease hashes are
    on different slots anyway. A few round trips per tick, off the bid path.
    """

    def write_each(self, leases: Mapping[str, Mapping[str, Lease]], ttl_ms: int) -> None:
        for node, held in leases.items():
            WRITE_LEASES.run_sync(self._client, self._write_keys(node), write_args(held, ttl_ms))


def build_reconciler(
    valkey_url: str,
    aws_endpoint: str,
    campaigns: Callable[[], Sequence[Campaign]],
    config: PacingConfig | None = None,
    stream: str = DEFAULT_STREAM,
    table_name: str = "bidsim-spend",
    region: str = "us-east-1",
    clock: Clock | None = None,
    curves: dict[str, Curve] | None = None,
    valkey_cluster: bool = False,
) -> Reconciler:
    """A reconciler wired to real clients (creates the spend table if missing).

    ``valkey_cluster``: ``valkey_url`` is a Valkey Cluster node. Raises
    ``redis.RedisError`` when a cluster's slot map can't be read.
    """
    table = SpendTable(aws_client("dynamodb", aws_endpoint, region), table_name)
    table.ensure_table()
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kinesis")
    reader = KinesisReader(aws_client("kinesis", aws_endpoint, region), stream, table, pool)
    client = connect_sync(valkey_url, cluster=valkey_cluster, timeout_s=_VALKEY_TIMEOUT_S)
    writer = ClusterLeaseWriter(client) if valkey_cluster else LeaseWriter(client)
    return Reconciler(reader, table, writer, campaigns, clock or SystemClock(), config, curves)


def campaigns_from_store(store: CampaignTable) -> Callable[[], list[Campaign]]:
    """A campaign source over the campaign table that keeps the last good set on errors."""
    last: list[Campaign] = []

    def load() -> list[Campaign]:
        nonlocal last
        try:
            last = campaigns_from_docs(store.scan_docs())
        except (StoreError, CampaignError) as exc:
            log.error("pacing: campaign reload failed, keeping %d campaigns: %s", len(last), exc)
        return last

    return load
