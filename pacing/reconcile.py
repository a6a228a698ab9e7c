"""The reconciler's tick as pure logic: spend in, pacing rates and leases out.

Each tick, for each campaign of the UTC day:

1. measure: spend applied so far vs the curve's target, as seconds of average spend
   (``(spent - target) / (budget / 86400)``), so the same gains fit any budget;
2. control: the PID turns that into a pacing rate (bid probability);
3. protect: the breaker sees the interval's spend vs its target; once open, the
   campaign gets rate 0 and empty leases for the rest of the day;
4. take back: the unspent remainders of nodes that left are taken off the exposure
   (``LeaseBook.give_back``), so this tick can grant them to the nodes that stay;
5. lease: every live node gets the same fresh lease, sized so that
   ``spent + exposure <= budget``. Exposure is an honest upper bound on what nodes can
   still spend: what was granted minus the spend applied since, capped at the unexpired
   leases' amounts (``pacing.lease.LeaseBook``), so spend drawn from a lease is not
   counted twice (once in ``spent``, once as the lease's full amount);
6. check: the invariants, reported rather than raised (the caller logs and counts):
   ``spent + exposure <= budget``, and no spend beyond what was leased (overdrawn);
   and, per advertiser, that its total equals the sum of its campaigns' totals
   (``advertiser_mismatches``, which the caller runs on the totals it read).

``SpendBook`` applies ledger entries exactly once by ledger id, in memory: the rule
``pacing.spend_table`` enforces in DynamoDB, for sums computed from a ledger.
Nothing here does I/O or reads a clock: time comes in as ``now_ms``.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from bidder.core.campaigns import Campaign
from bidder.core.ledger import LedgerEntry, cost_of
from pacing.breaker import Breaker
from pacing.curves import BUILTIN, DAY_S, Curve, day_of, resolve_curve, second_of_day
from pacing.lease import (
    DEFAULT_CHUNK_PERIODS,
    RATE_SCALE,
    Lease,
    LeaseBook,
    ReturnedLease,
    chunk_micros,
    expiry_ms,
    grant_per_node,
    tail_holders,
)
from pacing.pid import Pid, PidGains
from pacing.stream_lag import DEFAULT_LEDGER_DELAY_S, DEFAULT_THRESHOLD_S

DEFAULT_GAINS = PidGains(kp=0.03, ki=0.001, kd=0.0)
"""Tuned on the standard scenario (docs/pacing.md): stable for supply 1.2-7.5x target."""


@dataclass(frozen=True, slots=True)
class PacingConfig:
    tick_s: float = 5.0
    gains: PidGains = DEFAULT_GAINS
    chunk_periods_per_day: int = DEFAULT_CHUNK_PERIODS
    chunk_micros: int | None = None
    """A fixed chunk for every campaign; None: budget / nodes / chunk_periods_per_day."""
    breaker_ratio: float = 3.0
    breaker_window_s: float = 60.0
    initial_rate: float = 0.5
    """The rate before any spend has been seen (the integral's starting value)."""
    lag_threshold_s: float = DEFAULT_THRESHOLD_S
    """Spend stream consumer lag above which no lease is granted (``pacing.stream_lag``)."""
    ledger_delay_s: float = DEFAULT_LEDGER_DELAY_S
    """How long (real seconds, like the lag) after a debit its ledger entry may reach the
    spend stream: the lease book keeps an expired lease in its cap until the spend read
    covers its expiry (``pacing.stream_lag.applied_through_ms``)."""

    @property
    def tick_ms(self) -> int:
        return round(self.tick_s * 1000)

    @property
    def lag_threshold_ms(self) -> int:
        return round(self.lag_threshold_s * 1000)

    def problems(self) -> list[str]:
        found = []
        if not 0.05 <= self.tick_s <= 3_600:
            found.append(f"tick_s must be in 0.05..3600, got {self.tick_s}")
        if self.chunk_periods_per_day < 1:
            found.append("chunk_periods_per_day must be at least 1")
        if self.chunk_micros is not None and self.chunk_micros < 1:
            found.append("chunk_micros must be at least 1")
        if self.breaker_ratio <= 1 or self.breaker_window_s <= 0:
            found.append("breaker_ratio must be above 1 and breaker_window_s above 0")
        if not self.lag_threshold_s >= 0.001:
            found.append(f"lag_threshold_s must be at least 0.001, got {self.lag_threshold_s}")
        if not 0 <= self.ledger_delay_s <= 3_600:
            found.append(f"ledger_delay_s must be in 0..3600, got {self.ledger_delay_s}")
        return found


@dataclass(frozen=True, slots=True)
class Budget:
    """What pacing needs of a campaign."""

    campaign_id: str
    advertiser: str
    daily_budget_micros: int
    curve: Curve
    active: bool = True
    max_cost_micros: int = 0
    """The most one impression can cost (its maximum bid): a node bids only while its
    lease covers it, so the end of the budget goes to as few nodes as that takes."""


def budget_of(campaign: Campaign, curves: Mapping[str, Curve] = BUILTIN) -> Budget:
    """The campaign's budget and resolved curve; raises CurveError on an unknown curve."""
    return Budget(
        campaign.id,
        campaign.advertiser,
        campaign.daily_budget_micros,
        resolve_curve(campaign.pacing_curve, curves),
        campaign.active,
        cost_of(campaign.max_bid_cpm_micros),
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """One campaign's outcome of a tick: the lease every live node gets."""

    campaign_id: str
    lease: Lease
    target_micros: int
    spent_micros: int
    exposure_micros: int
    """What nodes can still spend after this tick's grant (an upper bound)."""
    overdrawn_micros: int
    """Spend applied since the previous tick beyond the exposure then: not leased."""
    paused: bool
    tripped: bool
    """The breaker opened on this tick."""
    returned: tuple[tuple[ReturnedLease, int], ...] = ()
    """Departed nodes' records considered on this tick, each with what it took off."""
    holders: int | None = None
    """How many of the live nodes get ``lease`` (the first, in ``node_leases`` order);
    the others get it empty. None: all of them."""

    @property
    def returned_micros(self) -> int:
        return sum(taken for _, taken in self.returned)

    @property
    def rate(self) -> float:
        return self.lease.rate_ppm / RATE_SCALE


def node_leases(nodes: Sequence[str], plans: Sequence[Plan]) -> dict[str, dict[str, Lease]]:
    """Each live node's leases of a tick: a plan's lease for its ``holders`` first nodes
    (sorted by id, so a renewed lease reaches the same ones), an empty one for the rest."""
    ordered = sorted(nodes)
    out: dict[str, dict[str, Lease]] = {node: {} for node in ordered}
    for plan in plans:
        holders = len(ordered) if plan.holders is None else plan.holders
        empty = dataclasses.replace(plan.lease, amount_micros=0)
        for k, node in enumerate(ordered):
            out[node][plan.campaign_id] = plan.lease if k < holders else empty
    return out


class CampaignPacer:
    """One campaign's controller, breaker and lease book for one pacing day."""

    __slots__ = ("_last_s", "_last_spent", "book", "breaker", "budget", "config", "day", "pid")

    def __init__(
        self, budget: Budget, config: PacingConfig, day: int, book: LeaseBook | None = None
    ) -> None:
        """``book``: the leases still outstanding from the previous day, if any."""
        self.budget = budget
        self.config = config
        self.day = day
        self.pid = Pid(config.gains, 0.0, config.initial_rate)
        self.breaker = Breaker(config.breaker_ratio, config.breaker_window_s)
        self.book = book if book is not None else LeaseBook()
        self._last_s: float | None = None
        self._last_spent = 0

    def step(
        self,
        now_ms: int,
        spent: int,
        nodes: int,
        lease_id: int,
        returns: Sequence[ReturnedLease] = (),
        applied_through_ms: int | None = None,
    ) -> Plan:
        """``applied_through_ms``: ``spent`` holds every debit made before it (default
        ``now_ms``; ``LeaseBook.observe``)."""
        b, cfg = self.budget, self.config
        now_s = second_of_day(now_ms)
        target = b.curve.target_micros(b.daily_budget_micros, now_s)
        tripped = self._observe(now_s, spent, target)
        rate = self._control(now_s, spent, target)
        paused = self.breaker.open or not b.active
        self.book.observe(now_ms, spent, applied_through_ms)
        returned = tuple((r, self.book.give_back(r.node, r.lease_id, r.micros)) for r in returns)
        if paused:
            lease, holders = Lease(lease_id, 0, expiry_ms(now_ms, cfg.tick_ms), 0), nodes
        else:
            lease, holders = self._lease(now_ms, spent, nodes, lease_id, round(rate * RATE_SCALE))
        return Plan(
            b.campaign_id, lease, target, spent, self.book.exposure, self.book.overdrawn,
            paused, tripped, returned, holders,
        )  # fmt: skip

    def _lease(
        self, now_ms: int, spent: int, nodes: int, lease_id: int, rate_ppm: int
    ) -> tuple[Lease, int]:
        """This tick's lease and how many of the ``nodes`` hold it (``Plan.holders``)."""
        b, cfg, book = self.budget, self.config, self.book
        chunk = cfg.chunk_micros or chunk_micros(
            b.daily_budget_micros, max(nodes, 1), cfg.chunk_periods_per_day
        )
        expires = expiry_ms(now_ms, cfg.tick_ms)
        available = b.daily_budget_micros - spent - book.exposure
        holders = tail_holders(available, nodes, b.max_cost_micros)
        per_node = grant_per_node(
            b.daily_budget_micros, spent, book.exposure, holders, chunk, b.max_cost_micros
        )
        kept = book.keepable(per_node, nodes)
        if kept is None:
            book.record(lease_id, per_node, holders, expires, nodes)
            return Lease(lease_id, per_node, expires, rate_ppm), holders
        # What is left of the budget is out already: keep that lease, no smaller one.
        # While each holder can surely still bid from it, renew it, so it never lapses
        # before the next tick lands; else let it lapse, and the tick after its expiry
        # splits what is left afresh, over fewer nodes at the end (``tail_holders``):
        # renewed further, a node that had spent its share would idle while the
        # others' shares last.
        lease = dataclasses.replace(kept.lease, rate_ppm=rate_ppm)
        if book.each_holder_covers(lease.lease_id, max(b.max_cost_micros, 1)):
            book.renew(lease.lease_id, expires)
            lease = dataclasses.replace(lease, expires_ms=expires)
        return lease, kept.holders

    def _observe(self, now_s: float, spent: int, target: int) -> bool:
        if self._last_s is None or now_s <= self._last_s:
            return False
        b = self.budget
        dt = now_s - self._last_s
        interval_target = target - b.curve.target_micros(b.daily_budget_micros, self._last_s)
        return self.breaker.observe(now_s, dt, spent - self._last_spent, interval_target)

    def _control(self, now_s: float, spent: int, target: int) -> float:
        dt = 0.0 if self._last_s is None else max(now_s - self._last_s, 0.0)
        self._last_s, self._last_spent = now_s, spent
        per_second = self.budget.daily_budget_micros / DAY_S
        return self.pid.update((spent - target) / per_second, dt)


@dataclass(slots=True)
class TickResult:
    plans: list[Plan] = field(default_factory=list)
    tripped: list[str] = field(default_factory=list)
    """Campaigns whose breaker opened on this tick."""
    violations: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Campaigns with no budget state this tick (no spend figure): no lease."""
    returns_seen: list[ReturnedLease] = field(default_factory=list)
    """The returned records this tick considered (applied, or moot: expired, unknown
    campaign, already applied); none of them needs to be read again."""


class Reconcile:
    """The pure reconciler: call ``tick`` once per tick with the state read this tick."""

    def __init__(self, config: PacingConfig | None = None) -> None:
        self.config = config or PacingConfig()
        self.pacers: dict[str, CampaignPacer] = {}
        self._lease_id = 0

    def tick(
        self,
        now_ms: int,
        budgets: Sequence[Budget],
        spent: Mapping[str, int],
        nodes: int,
        returns: Sequence[ReturnedLease] = (),
        applied_through_ms: int | None = None,
    ) -> TickResult:
        """Plans for every campaign with a known spend; unknown spend means no lease.

        ``returns``: what departed nodes gave back. Each record is applied at most once
        however often it is passed; ``returns_seen`` lists the ones that need not be
        passed again (those of a campaign skipped this tick are not in it).
        ``applied_through_ms``: the ledger's watermark, the instant before which every
        debit is in ``spent`` (default ``now_ms``: a ledger on time).
        """
        self._lease_id = max(self._lease_id + 1, now_ms)
        day, result = day_of(now_ms), TickResult()
        by_campaign: dict[str, list[ReturnedLease]] = defaultdict(list)
        for item in returns:
            by_campaign[item.campaign_id].append(item)
        for budget in budgets:
            if budget.campaign_id not in spent:
                result.skipped.append(budget.campaign_id)
                continue
            mine = by_campaign.get(budget.campaign_id, [])
            plan = self._pacer(budget, day).step(
                now_ms, spent[budget.campaign_id], nodes, self._lease_id, mine, applied_through_ms
            )
            result.returns_seen += mine
            result.plans.append(plan)
            if plan.tripped:
                result.tripped.append(plan.campaign_id)
            result.violations += violations(plan, budget.daily_budget_micros)
        known = {budget.campaign_id for budget in budgets}
        for campaign_id, items in by_campaign.items():
            if campaign_id not in known:  # no such campaign any more: nothing to take off
                result.returns_seen += items
        return result

    def _pacer(self, budget: Budget, day: int) -> CampaignPacer:
        pacer = self.pacers.get(budget.campaign_id)
        if pacer is None or pacer.day != day:
            # yesterday's leases stay spendable until they expire: carry them over
            book = None if pacer is None else pacer.book.rebased()
            pacer = self.pacers[budget.campaign_id] = CampaignPacer(budget, self.config, day, book)
        elif pacer.budget != budget:
            pacer.budget = budget  # a budget or curve edit applies from this tick on
        return pacer


def violations(plan: Plan, budget_micros: int) -> list[str]:
    """The invariants a plan breaks: over budget with exposure, or spend not leased."""
    found = []
    if plan.overdrawn_micros > 0:
        found.append(
            f"campaign {plan.campaign_id}: spent {plan.overdrawn_micros} beyond its leases "
            "since the last tick"
        )
    if plan.spent_micros + plan.exposure_micros > budget_micros:
        found.append(
            f"campaign {plan.campaign_id}: spent {plan.spent_micros} + leased "
            f"{plan.exposure_micros} > budget {budget_micros}"
        )
    return found


class SpendBook:
    """Ledger entries applied exactly once by ledger id, summed per campaign and advertiser."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self.campaigns: dict[str, int] = defaultdict(int)
        self.advertisers: dict[str, int] = defaultdict(int)

    def apply(self, entries: Iterable[LedgerEntry]) -> list[LedgerEntry]:
        """Apply the entries not seen before (in any order); returns those."""
        fresh = []
        for entry in entries:
            if entry.ledger_id in self._seen:
                continue
            self._seen.add(entry.ledger_id)
            self.campaigns[entry.campaign_id] += entry.cost_micros
            self.advertisers[entry.advertiser] += entry.cost_micros
            fresh.append(entry)
        return fresh


@dataclass(frozen=True, slots=True)
class AdvertiserMismatch:
    """An advertiser whose spend total differs from the sum of its campaigns' totals."""

    advertiser: str
    campaigns_micros: int
    total_micros: int

    def __str__(self) -> str:
        return (
            f"advertiser {self.advertiser}: campaigns sum to {self.campaigns_micros}, "
            f"advertiser total is {self.total_micros}"
        )


def advertiser_mismatches(
    campaign_totals: Mapping[str, int],
    advertiser_of: Mapping[str, str],
    advertiser_totals: Mapping[str, int],
) -> list[AdvertiserMismatch]:
    """Advertisers whose total differs from the sum of their campaigns' totals."""
    sums: dict[str, int] = defaultdict(int)
    for campaign_id, total in campaign_totals.items():
        sums[advertiser_of.get(campaign_id, "?")] += total
    found = []
    for advertiser in sorted(set(sums) | set(advertiser_totals)):
        campaigns, total = sums.get(advertiser, 0), advertiser_totals.get(advertiser, 0)
        if campaigns != total:
            found.append(AdvertiserMismatch(advertiser, campaigns, total))
    return found
