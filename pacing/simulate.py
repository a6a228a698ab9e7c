"""A simulated pacing day: the real controller, leases and reconciler tick, in virtual time.

Theory of operation. Time moves in reconciler ticks. At each tick the pure reconciler
(``pacing.reconcile.Reconcile``) sees the spend applied so far and writes one lease
per node; each node installs it (``pacing.lease``) and then spends through the next
tick interval. A node's wins in an interval are Poisson with mean
``supply x rate``: bidding each request with probability ``rate`` and winning each
bid independently thins a Poisson stream into a Poisson stream, so one draw per node
per tick stands for the per-request coin flips of the live node. Each win's cost comes
from the win-price model; the node's ``LeaseAccount`` caps what it may spend.

Supply: ``supply_ratio`` is what the fleet would spend at rate 1 over what the target
curve asks for, hour by hour when the supply curve is the target curve (``supply``
None) or a bidstream's shape otherwise; ``actual`` (``pacing.actual``) then shifts,
scales or drops that supply and shifts the market's prices, hour by hour
(``Scenario.available_by_hour``); a live day's ``admitted`` shares take out, minute
by minute, the supply its bidder shed for load. Events (a supply step, a stalled or late
reconciler, a runaway campaign, a ledger that lags) are switched on by ``Scenario``
fields. The same seed gives the same day.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from bidder.core.ledger import cost_of
from pacing.actual import FORECAST, Actual
from pacing.curves import DAY_MS, DAY_S, HOUR_S, STANDARD, Curve
from pacing.lease import RATE_SCALE, FleetAccounts, chunk_micros
from pacing.reconcile import Budget, PacingConfig, Reconcile
from pacing.stream_lag import applied_through_ms

DAY0_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: the simulated day (any UTC midnight would do)."""
CAMPAIGN = "sim"


@dataclass(frozen=True, slots=True)
class Market:
    """The win-price model: the best competing CPM is lognormal; we pay it (second price)."""

    median_cpm_micros: int = 2_000_000
    sigma: float = 0.5
    bid_cpm_micros: int = 2_500_000

    def p_win(self) -> float:
        z = math.log(self.bid_cpm_micros / self.median_cpm_micros) / self.sigma
        return statistics.NormalDist().cdf(z)

    def cost_table(self, size: int = 4096) -> np.ndarray:
        """Per-impression costs (micros) at evenly spaced quantiles of the price we pay."""
        normal, p = statistics.NormalDist(), self.p_win()
        mu = math.log(self.median_cpm_micros)
        cpms = (
            math.exp(mu + self.sigma * normal.inv_cdf((i + 0.5) / size * p)) for i in range(size)
        )
        return np.array([cost_of(round(c)) for c in cpms], dtype=np.int64)

    def spend_per_request(self) -> float:
        """Expected micros spent per request bid on: P(win) x the mean price paid."""
        return self.p_win() * float(self.cost_table().mean())

    def shifted(self, factor: float) -> Market:
        """The same market with the median clearing price times ``factor``."""
        return replace(self, median_cpm_micros=round(self.median_cpm_micros * factor))


@dataclass(frozen=True, slots=True)
class Scenario:
    budget_micros: int = 10_000_000_000
    nodes: int = 50
    curve: Curve = STANDARD
    supply: Curve | None = None
    """Shape of supply over the day; None: the target curve's shape."""
    supply_ratio: float = 2.5
    """Forecast spend at rate 1 / target spend, under the base market."""
    actual: Actual = FORECAST
    """How the day's real supply and prices differ from the forecast (``pacing.actual``)."""
    market: Market = Market()
    config: PacingConfig = field(default_factory=PacingConfig)
    seed: int = 1
    pacing: bool = True
    """False: the ASAP baseline (rate 1 always; leases still apply)."""
    expected_values: bool = False
    """Spend the expected value instead of drawing (a noise-free control response)."""
    start_s: float = 0.0
    end_s: float = DAY_S
    step_at_s: float | None = None
    step_factor: float = 1.0
    stall_at_s: float | None = None
    """The reconciler stops for good at this instant."""
    late_at_s: float | None = None
    late_ticks: int = 1
    """Ticks skipped from ``late_at_s``; the next tick comes that much late."""
    runaway_at_s: float | None = None
    runaway_factor: float = 4.0
    """From ``runaway_at_s`` nodes ignore the rate and supply grows by this factor."""
    max_cost_micros: int = 0
    """The most one impression can cost (the campaign's maximum bid): a node bids only
    while its lease account covers it, as the live node does, and a win is debited to
    the node that bid (live, the notice is routed to it: ``pacing.debits``; the live
    debit lands up to one lease refresh later, which this does not model). 0: a node
    spends its lease to the last micro."""
    admitted: tuple[float, ...] = ()
    """The share of each simulated minute's supply the bidder let through (1440 shares,
    a live day's: the replay report's ``load_shed_by_minute``); empty: all of it. A
    bidder that sheds requests for its own load loses that supply, in bursts as short
    as its stalls."""
    ledger_lag_ticks: float = 0.0
    """How many ticks behind the spend the reconciler sees is: each tick sees the spend
    applied by that instant (``seen_spend``; fractions of a tick allowed) and tells the
    lease book so (its watermark, ``pacing.lease``). A live stack's control loop has a
    delay of its own, which this stands for when the simulator is set beside it
    (``bidder.replay.offline_days``)."""

    @property
    def chunk(self) -> int:
        cfg = self.config
        return cfg.chunk_micros or chunk_micros(
            self.budget_micros, self.nodes, cfg.chunk_periods_per_day
        )

    def full_rate_spend(self, now_s: float, by_hour: list[float] | None = None) -> float:
        """Expected fleet spend at rate 1 in the tick after ``now_s`` (supply step included).

        ``by_hour``: ``available_by_hour()``, when the caller already holds it."""
        hours = by_hour if by_hour is not None else self.available_by_hour()
        end = min(now_s + self.config.tick_s, float(DAY_S))
        # A tick that crosses an hour takes each hour's share.
        total = sum(per_hour * s / HOUR_S for per_hour, s in _pieces(hours, HOUR_S, now_s, end))
        stepped = self.step_at_s is not None and now_s >= self.step_at_s
        if self.admitted:
            total *= admitted_share(self.admitted, now_s, end)
        return total * (self.step_factor if stepped else 1.0)

    def available_by_hour(self) -> list[float]:
        """Expected spend at rate 1 in each hour of the actual day (no side-run events)."""
        base = self.market.spend_per_request()
        dearer = self.market.shifted(self.actual.price_factor).spend_per_request() / base
        money = {False: 1.0, True: dearer}
        shape = self.supply or self.curve
        return [
            self.supply_ratio * self.budget_micros * self.actual.volume_share(shape, h)
            * money[self.actual.price_shifted(h)]
            for h in range(24)
        ]  # fmt: skip


@dataclass
class Trace:
    """What happened, tick by tick (index k covers the interval after tick k)."""

    scenario: Scenario
    t_s: np.ndarray
    spend: np.ndarray
    """Micros spent by the fleet in the interval after each tick."""
    rate: np.ndarray
    """The pacing rate in force during that interval."""
    node_spend_after_last_tick: np.ndarray | None = None
    """With a stall: what each node spent from the reconciler's last tick on."""
    last_spend_s: float | None = None
    tripped_at_s: float | None = None
    violations: list[str] = field(default_factory=list)

    @cached_property
    def cum(self) -> np.ndarray:
        start = self.scenario.curve.target_micros(self.scenario.budget_micros, self.t_s[0])
        return start + np.cumsum(self.spend)

    def target_at(self, second: float) -> int:
        return self.scenario.curve.target_micros(self.scenario.budget_micros, second)

    def spent_by(self, second: float) -> int:
        """Cumulative spend by ``second`` (a tick boundary)."""
        n = int(np.searchsorted(self.t_s, second - 1e-9))
        base = self.target_at(self.t_s[0])
        return int(base + self.spend[:n].sum())


Progress = Callable[[int], None]


def run(sc: Scenario, progress: Progress | None = None) -> Trace:
    """Simulate ``sc`` from ``start_s`` to ``end_s``; ``progress(ticks)`` now and then."""
    return _Day(sc).run(progress)


class _Day:
    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.tick_s = sc.config.tick_s
        self.rng = np.random.default_rng(sc.seed)
        shifted = sc.market.shifted(sc.actual.price_factor)
        self.costs = {False: sc.market.cost_table(), True: shifted.cost_table()}
        self.mean_cost = {k: float(table.mean()) for k, table in self.costs.items()}
        self.available = sc.available_by_hour()
        self.reconcile = Reconcile(sc.config)
        self.budget = Budget(
            CAMPAIGN, "sim-advertiser", sc.budget_micros, sc.curve,
            max_cost_micros=sc.max_cost_micros,
        )  # fmt: skip
        self.fleet = FleetAccounts(sc.nodes)
        self.node_ids = np.arange(sc.nodes)
        self.applied = sc.curve.target_micros(sc.budget_micros, sc.start_s)
        kept = int(sc.ledger_lag_ticks) + 2
        self.ledger = deque([self.applied] * kept, maxlen=kept)
        """The spend applied by each of the last ticks, oldest first (``seen_spend``)."""

    def run(self, progress: Progress | None) -> Trace:
        sc = self.sc
        ticks = np.arange(sc.start_s, sc.end_s - 1e-9, self.tick_s)
        spend = np.zeros(len(ticks), dtype=np.int64)
        rates = np.zeros(len(ticks))
        trace = Trace(sc, ticks, spend, rates)
        after_stall = np.zeros(sc.nodes, dtype=np.int64)
        for k, now_s in enumerate(ticks.tolist()):
            if k:
                self.ledger.append(self.applied)
            if self._reconciler_runs(now_s):
                self._tick(now_s, trace)
            node_spend, rates[k] = self._spend(now_s)
            spend[k] = node_spend.sum()
            self.applied += int(spend[k])
            if sc.stall_at_s is not None and now_s >= sc.stall_at_s - self.tick_s - 1e-9:
                after_stall += node_spend
            if spend[k] > 0:
                trace.last_spend_s = now_s + self.tick_s
            if progress is not None and k % 1000 == 999:
                progress(1000)
        if sc.stall_at_s is not None:
            trace.node_spend_after_last_tick = after_stall
        return trace

    def _reconciler_runs(self, now_s: float) -> bool:
        sc = self.sc
        if sc.stall_at_s is not None and now_s >= sc.stall_at_s:
            return False
        late = sc.late_at_s
        return late is None or not late <= now_s < late + sc.late_ticks * self.tick_s

    def _tick(self, now_s: float, trace: Trace) -> None:
        now_ms = DAY0_MS + round(now_s * 1000)
        lag = self.sc.ledger_lag_ticks
        seen = {CAMPAIGN: seen_spend(self.ledger, lag)}
        through = applied_through_ms(now_ms, round(lag * self.sc.config.tick_ms), 0)
        result = self.reconcile.tick(now_ms, [self.budget], seen, self.sc.nodes, (), through)
        plan = result.plans[0]
        trace.violations.extend(result.violations)
        if plan.tripped:
            trace.tripped_at_s = now_s
        self.fleet.install(plan.lease, plan.holders)

    def _spend(self, now_s: float) -> tuple[np.ndarray, float]:
        """Each node's spend in the interval after ``now_s``, and the rate it bid at."""
        sc = self.sc
        now_ms = DAY0_MS + round(now_s * 1000)
        lease = self.fleet.lease
        if lease is None or not self.fleet.live(now_ms):
            return np.zeros(sc.nodes, dtype=np.int64), 0.0
        rate = lease.rate_ppm / RATE_SCALE if sc.pacing else 1.0
        full = self._full_rate_spend(now_s)
        if sc.runaway_at_s is not None and now_s >= sc.runaway_at_s:
            rate, full = 1.0, full * sc.runaway_factor
        per_node, shifted = full * rate / sc.nodes, sc.actual.price_shifted(_hour(now_s))
        if sc.max_cost_micros and not sc.expected_values:
            wins, costs = self._wins(per_node, shifted)
            order = self.rng.permutation(len(costs))  # the nodes' wins interleave in time
            bidders = np.repeat(np.arange(sc.nodes), wins)[order]
            spent = self.fleet.spend_wins(bidders, costs[order], now_ms, sc.max_cost_micros)
            return spent, rate
        return self.fleet.spend_up_to(self._draw(per_node, shifted), now_ms), rate

    def _full_rate_spend(self, now_s: float) -> float:
        return self.sc.full_rate_spend(now_s, self.available)

    def _draw(self, per_node_micros: float, price_shifted: bool) -> np.ndarray:
        """Each node's cost of wins for an expected ``per_node_micros``."""
        nodes = self.sc.nodes
        if self.sc.expected_values:
            return np.full(nodes, round(per_node_micros), dtype=np.int64)
        wins, costs = self._wins(per_node_micros, price_shifted)
        # Each node's sum of its run of costs. Float weights are exact here: a tick's
        # costs add up to far less than 2**53 micros.
        owners = np.repeat(self.node_ids, wins)
        return np.bincount(owners, weights=costs, minlength=nodes).astype(np.int64)

    def _wins(self, per_node_micros: float, price_shifted: bool) -> tuple[np.ndarray, np.ndarray]:
        """Each node's number of wins, and their costs, node after node."""
        table = self.costs[price_shifted]
        wins = self.rng.poisson(per_node_micros / self.mean_cost[price_shifted], self.sc.nodes)
        return wins, table[self.rng.integers(0, len(table), int(wins.sum()))]


def seen_spend(applied: Sequence[int], lag_ticks: float) -> int:
    """The spend a tick sees ``lag_ticks`` behind: ``applied`` holds the spend applied
    by each tick, oldest first, the last one now. Within an interval the spend is known
    only as its total, so a fraction of a tick takes that share of it, linearly."""
    whole = int(lag_ticks)
    newer, older = applied[-1 - whole], applied[-2 - whole]
    return round(newer - (lag_ticks - whole) * (newer - older))


def admitted_share(admitted: Sequence[float], start_s: float, end_s: float) -> float:
    """The mean of the per-minute ``admitted`` shares over ``[start_s, end_s)``, each
    minute weighted by how much of it the interval covers (1 for an empty interval)."""
    total = sum(share * s for share, s in _pieces(admitted, 60.0, start_s, end_s))
    return total / (end_s - start_s) if end_s > start_s else 1.0


def _pieces(
    values: Sequence[float], width_s: float, start_s: float, end_s: float
) -> Iterator[tuple[float, float]]:
    """``(value, seconds)`` for each window of ``width_s`` that ``[start_s, end_s)``
    covers, ``values`` holding one value per window (the last one past their end)."""
    at = start_s
    while at < end_s - 1e-9:
        upto = min(end_s, (int(at // width_s) + 1) * width_s)
        yield values[min(int(at // width_s), len(values) - 1)], upto - at
        at = upto


def _hour(second: float) -> int:
    return min(int(second // HOUR_S), 23)


def timed_run(sc: Scenario, progress: Progress | None = None) -> tuple[Trace, float]:
    """``run`` and its wall time in seconds (for reports and benchmarks, not tests)."""
    began = time.perf_counter()
    trace = run(sc, progress)
    return trace, time.perf_counter() - began


def window(sc: Scenario, at_s: float, before_s: float, after_s: float) -> Scenario:
    """The scenario cut to a window around ``at_s`` (warm-up before, watch after)."""
    return replace(sc, start_s=max(at_s - before_s, 0.0), end_s=min(at_s + after_s, DAY_S))


__all__ = [
    "DAY0_MS", "DAY_MS", "Market", "Scenario", "Trace", "admitted_share", "run", "seen_spend",
    "timed_run", "window",
]  # fmt: skip
