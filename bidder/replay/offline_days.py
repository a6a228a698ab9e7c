"""The offline simulator's days for the campaigns of a live day, and their supply.

Each campaign paced on the live day gets a ``pacing.simulate`` scenario with the live
stack's settings in simulated time (``OfflineSettings``): its budget and curve, the
bidder's nodes, the reconciler's gains, tick, chunk and breaker window, the delay of
the live control loop (``loop_delay_ticks``), nodes that bid only while their lease
covers one impression at the maximum bid, and a market whose win price is centred on
the ``--supply-from`` report's eCPM. Its supply, what it would spend at rate 1 per
hour, is that report's spend, or with the report's book (``bidder.replay.supply_book``)
what it would meet while the other campaigns are paced as the simulator paces them
(``book_supplies``).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bidder.replay.campaign_outcomes import Budget
from bidder.replay.supply_book import BookJson, supply_at
from bidder.serve.settings import Settings
from pacing.config_file import load_pacing_file
from pacing.curves import HOUR_S, Curve
from pacing.pid import PidGains
from pacing.reconcile import DEFAULT_GAINS, PacingConfig
from pacing.refresher import refresh_interval_s
from pacing.report import hourly
from pacing.simulate import Market, Scenario, Trace, run


@dataclass(frozen=True, slots=True)
class OfflineSettings:
    """The live stack's pacing settings, in simulated time."""

    nodes: int
    tick_s: float
    chunk_periods: int
    breaker_window_s: float
    seeds: int = 10
    """Simulated days (seeds 1..N): with a few impressions an hour one seed's figures
    are noise (northwind, one-minute day: EOD 0.86-0.97 over 20 seeds), so the offline
    figures are their mean, with the range beside them."""
    gains: PidGains = DEFAULT_GAINS
    loop_delay_ticks: float = 0.0
    """How far behind the spend the live leases act, in ticks (``loop_delay_ticks``);
    the simulated reconciler sees the spend that far behind."""

    def summary(self) -> dict[str, Any]:
        """The settings as a report shows them, the gains one by one."""
        fields = dataclasses.asdict(self)
        del fields["gains"]
        return {**fields, "kp": self.gains.kp, "ki": self.gains.ki, "kd": self.gains.kd}


def loop_delay_ticks(ledger_delay_s: float, refresh_s: float, tick_s: float) -> float:
    """The live control loop's delay in ticks: a debit reaches the spend stream up to
    ``ledger_delay_s`` after it is made, and a node takes up a new lease at its next
    refresh, ``refresh_s / 2`` later on average. With the live day's 1 s ticks that is
    half a tick (on the default 5 s ticks, a seventh): a simulated day without it tracks
    the curve closer than the live stack can (docs/pacing.md)."""
    return (ledger_delay_s + refresh_s / 2) / tick_s


@dataclass(frozen=True, slots=True)
class OfflineDay:
    """A campaign's simulated day, but for its supply per hour."""

    scenario: Scenario
    supply_micros: list[float]
    """What it spends at rate 1 per hour: the ``--supply-from`` replay's spend."""

    def with_supply(self, supply: Sequence[float]) -> Scenario | None:
        total = sum(supply)
        if total <= 0:
            return None
        return replace(
            self.scenario,
            supply=Curve.from_weights(list(supply), "supply by hour"),
            supply_ratio=total / self.scenario.budget_micros,
        )

    def days(
        self, supply: Sequence[float], seeds: int, admitted: tuple[float, ...] = ()
    ) -> list[Trace]:
        """``admitted``: the share of each minute's supply let through (``Scenario``)."""
        scenario = self.with_supply(supply)
        if scenario is None:
            return []
        return [
            run(replace(scenario, seed=seed, admitted=admitted)) for seed in range(1, seeds + 1)
        ]


def offline_settings(live: Settings, speed: float) -> OfflineSettings:
    """The pacing settings of a live stack on a simulated clock running ``speed``x, for
    its offline days."""
    # The reconciler's own way to its settings: the defaults, the file's over them.
    config = PacingConfig(chunk_periods_per_day=live.lease_chunk_periods())
    if live.pacing_config is not None:
        config = load_pacing_file(live.pacing_config).apply(config)
    refresh_s = refresh_interval_s(live.lease_refresh_s, live.pacing_tick_s)
    return OfflineSettings(
        nodes=live.workers,
        tick_s=live.pacing_tick_s * speed,
        chunk_periods=config.chunk_periods_per_day,
        breaker_window_s=live.breaker_window_s,
        gains=config.gains,
        loop_delay_ticks=loop_delay_ticks(config.ledger_delay_s, refresh_s, live.pacing_tick_s),
    )


def offline_day(
    calibrated: Mapping[str, Any] | None, budget: Budget, settings: OfflineSettings
) -> OfflineDay | None:
    """The campaign's simulated day on its ``--supply-from`` figures; None without them."""
    supply = list(calibrated["spend_by_hour"]) if calibrated else []
    if not calibrated or not supply or sum(supply) <= 0 or budget.curve is None:
        return None
    median = max(round(calibrated["ecpm_usd"] * 1_000_000), 1)
    scenario = Scenario(
        budget_micros=budget.daily_budget_micros,
        nodes=settings.nodes,
        curve=budget.curve,
        market=Market(median_cpm_micros=median, bid_cpm_micros=round(median * 1.25)),
        config=PacingConfig(
            tick_s=settings.tick_s,
            gains=settings.gains,
            chunk_periods_per_day=settings.chunk_periods,
            breaker_window_s=settings.breaker_window_s,
        ),
        max_cost_micros=budget.max_cost_micros,
        ledger_lag_ticks=settings.loop_delay_ticks,
    )
    return OfflineDay(scenario, supply)


BOOK_ROUNDS = 3
"""Rounds of simulated rates fed back into the book. A campaign's supply moves only when
the rates of those priced above it do, so it settles in as many rounds as the chain of
campaigns outbidding each other is long: on the 20-minute day of docs/pacing.md,
copperhill's supply went 1.62x -> 2.02x -> 2.06x its budget and did not move after."""
BOOK_SEEDS = 3
"""Simulated days per campaign and round (the figures themselves use ``seeds``)."""


def book_supplies(book: BookJson, days: Mapping[str, OfflineDay | None]) -> dict[str, list[float]]:
    """Each campaign's supply per hour while the others bid as the simulator paces them.

    Start from every campaign at rate 1 (the ``--supply-from`` replay as it ran),
    simulate each paced campaign on its supply, take the share of its supply each
    simulated hour spent as its rate there, and read the book again at those rates;
    ``BOOK_ROUNDS`` times. A campaign without a simulated day bids at rate 1."""
    rates: dict[str, list[float]] = {}
    for _ in range(BOOK_ROUNDS):
        supplies = supply_at(book, rates)
        rates = {}
        for cid, offline in days.items():
            supply = supplies.get(cid, [0.0] * 24)
            if offline is not None and sum(supply) > 0:
                rates[cid] = _rates(offline.days(supply, BOOK_SEEDS), supply)
    return supply_at(book, rates)


def _rates(days: Sequence[Trace], supply: Sequence[float]) -> list[float]:
    """The share of each hour's supply the simulated days took; in an hour without
    supply, the pacing rate in force (the campaign still bids and may take the imp)."""
    spend = [statistics.fmean(col) for col in zip(*(hourly(d)[0] for d in days), strict=True)]
    rates = []
    for hour, (spent, offered) in enumerate(zip(spend, supply, strict=True)):
        if offered > 0:
            rates.append(min(spent / offered, 1.0))
        else:
            in_hour = [float(d.rate[(d.t_s // HOUR_S).astype(int) == hour].mean()) for d in days]
            rates.append(statistics.fmean(in_hour) if in_hour else 0.0)
    return rates


__all__ = [
    "BOOK_ROUNDS",
    "BOOK_SEEDS",
    "OfflineDay",
    "OfflineSettings",
    "book_supplies",
    "offline_day",
]
