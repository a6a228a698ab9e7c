"""A live day's pacing figures, beside the offline simulator's for the same day.

For each campaign with a budget whose target covers the whole simulated day (a replay
on the stream's clock of a one-day stream), the live figures come from the replay's
spend per simulated hour against the target curve (``pacing.report.day_figures``:
``eod_spend_ratio``, ``max_cum_error_ratio``, ``hours_in_band_ratio``).

The offline figures run ``pacing.simulate`` on the same day
(``bidder.replay.offline_days``): the campaign's budget and curve, the live stack's
pacing settings and the supply the campaign met. Supply is what the campaign would
spend at pacing rate 1, hour by hour: the replay cannot see it while pacing throttles,
so it comes from a replay of the same stream and the same campaigns with budgets too
large to bind (``--supply-from REPORT``). With that report's book of who priced each
imp (``bidder.replay.supply_book``) it is what the campaign meets while the others
are paced; without it, that replay's spend, where the others bid at rate 1 and take
more. Its total over the budget is the supply ratio; a campaign whose ratio is at
least ``BINDS_AT`` has a budget that binds. The offline figures are the mean of
``seeds`` simulated days, with their range (``offline_range``): at a few impressions
an hour, one day's figures are noise. ``limits`` names what bounds both sides;
``live_above_offline_supply`` the hours in which live met more supply than the
simulator had.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bidder.core.campaigns import Campaign
from bidder.core.ledger import cost_of
from bidder.replay.campaign_outcomes import Budget
from bidder.replay.hourly_shares import hourly_shares, widest_hours
from bidder.replay.load_shed import Admission
from bidder.replay.offline_days import OfflineDay, OfflineSettings, book_supplies, offline_day
from bidder.replay.supply_book import BookJson
from pacing.actual import achievable
from pacing.curves import Curve
from pacing.report import day_figures, tracking

BINDS_AT = 1.1
"""Supply at rate 1 over the budget from which a budget binds (noise aside)."""
KEYS = ("eod_spend_ratio", "max_cum_error_ratio", "hours_in_band_ratio")
MIN_DAY_WINS = 100
"""Fewer impressions a day than this leave an hour a handful: noise, not pacing."""
WHOLE_DAY = 0.999
"""A target of at least this share of the budget covers the day."""


def pacing_section(
    campaigns: Mapping[str, Mapping[str, Any]],
    budgets: Mapping[str, Budget],
    calibration: Mapping[str, Mapping[str, Any]] | None,
    offline: OfflineSettings,
    book: BookJson | None = None,
    admitted: Admission | None = None,
) -> dict[str, Any]:
    """``{campaign id: {live, offline, supply_ratio, binds, hourly_spend, hourly_target}}``.

    ``book``: the ``--supply-from`` report's ``supply_book``; with it each campaign's
    supply is what it would meet while the others are paced (``book_supplies``).
    ``admitted``: what the live bidder let through; with it each campaign also gets
    ``offline_admitted``, the simulator's days on that supply (``admitted_figures``)."""
    paced = {}
    for cid, figures in campaigns.items():
        budget, target = budgets.get(cid), figures.get("target_by_hour")
        if budget is None or budget.curve is None or target is None:
            continue
        if sum(target) >= WHOLE_DAY * budget.daily_budget_micros:
            paced[cid] = budget
    calibration = calibration or {}
    days = {
        cid: offline_day(calibration.get(cid), budget, offline) for cid, budget in paced.items()
    }
    supplies = {cid: day.supply_micros for cid, day in days.items() if day is not None}
    source = "spend"
    if book and any(book):
        supplies, source = book_supplies(book, days), "book"
    section = {}
    for cid, budget in paced.items():
        figures, supply = campaigns[cid], supplies.get(cid)
        spend, target = figures["spend_by_hour"], figures["target_by_hour"]
        entry: dict[str, Any] = {
            "live": _rounded(day_figures(spend, target, budget.daily_budget_micros)),
            "hourly_spend_micros": spend,
            "hourly_target_micros": target,
        }
        entry |= _offline(days[cid], supply, budget, offline)
        entry["offline_admitted"] = admitted_figures(days[cid], supply, offline, admitted)
        entry["offline_supply"] = None if supply is None else source
        entry["limits"] = limits(figures, budget, supply)
        entry["live_above_offline_supply"] = live_above_supply(spend, supply)
        calibrated = calibration.get(cid)
        entry["capped_share"] = {
            "live": capped_share(figures), "supply_from": capped_share(calibrated),
            "widest_hours": widest_capped_hours(figures, calibrated),
        }  # fmt: skip
        section[cid] = entry
    return section


CAPPED_GAP = 0.02
"""A difference in capped share (of eligible requests) that the report names."""


def capped_share(figures: Mapping[str, Any] | None) -> float | None:
    """The share of a campaign's eligible requests that its frequency caps refused (the
    campaign trace's counts); None where the report has no trace."""
    eligible = (figures or {}).get("requests_eligible")
    capped = (figures or {}).get("capped_no_bids")
    if not eligible or capped is None:
        return None
    return round(capped / eligible, 4)


MIN_HOUR_ELIGIBLE = 20
"""Eligible requests an hour needs on both sides for its capped shares to be compared."""


def widest_capped_hours(
    live: Mapping[str, Any] | None, supply_from: Mapping[str, Any] | None
) -> list[dict[str, Any]] | None:
    """The hours in which the ``--supply-from`` replay's caps refused a larger share of
    the eligible requests than live's, by more than ``CAPPED_GAP`` (``widest_hours``);
    None where either report lacks the hourly trace counts."""
    live_shares, rate_1_shares = _hourly_capped_shares(live), _hourly_capped_shares(supply_from)
    if live_shares is None or rate_1_shares is None:
        return None
    return [
        {"hour": hour, "live": paced, "supply_from": at_rate_1}
        for hour, at_rate_1, paced in widest_hours(rate_1_shares, live_shares, CAPPED_GAP)
    ]


def _hourly_capped_shares(figures: Mapping[str, Any] | None) -> list[float | None] | None:
    eligible = (figures or {}).get("requests_eligible_by_hour")
    capped = (figures or {}).get("capped_no_bids_by_hour")
    if not eligible or capped is None:
        return None
    return hourly_shares(capped, eligible, MIN_HOUR_ELIGIBLE)


def _offline(
    offline: OfflineDay | None,
    supply: Sequence[float] | None,
    budget: Budget,
    settings: OfflineSettings,
) -> dict[str, Any]:
    days = offline.days(supply, settings.seeds) if offline and supply else []
    if not days or supply is None:
        return {
            "supply_ratio": None, "binds": None, "offline": None, "offline_range": None,
            "offline_hourly": None, "offline_supply_micros": None,
        }  # fmt: skip
    ratio = sum(supply) / budget.daily_budget_micros
    figures = [tracking(day) for day in days]
    spread = _spread(figures)
    return {
        "supply_ratio": round(ratio, 4),
        "binds": ratio >= BINDS_AT,
        "offline": spread["mean"],
        "offline_range": spread["range"],
        "offline_hourly": figures[0]["hourly_spend_micros"],
        "offline_supply_micros": [round(s) for s in supply],
    }


def admitted_figures(
    offline: OfflineDay | None,
    supply: Sequence[float] | None,
    settings: OfflineSettings,
    admitted: Admission | None,
) -> dict[str, Any] | None:
    """The simulator's figures (mean and range over its days) on the supply the live
    bidder let through: the ``--supply-from`` supply with that replay's own shedding
    put back, then each minute's share live did not shed. Where live tracks these and
    not the plain offline figures, the difference is the supply it shed, not pacing."""
    if offline is None or not supply or admitted is None:
        return None
    unshed = [offered * factor for offered, factor in zip(supply, admitted.unshed, strict=True)]
    figures = [tracking(day) for day in offline.days(unshed, settings.seeds, admitted.minutes)]
    return _spread(figures) if figures else None


def admitted_text(entry: Mapping[str, Any]) -> str:
    """``offline_admitted`` in words: EOD spend, and hours in band with their range."""
    admitted = entry.get("offline_admitted")
    if not admitted:
        return "-"
    mean, (low, high) = admitted["mean"], admitted["range"]["hours_in_band_ratio"]
    return (
        f"EOD {mean['eod_spend_ratio']:.1%}, hours in band {mean['hours_in_band_ratio']:.1%}"
        f" ({low:.1%}-{high:.1%})"
    )


def _spread(figures: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``KEYS`` of several simulated days: their mean, and their range."""
    return {
        "mean": _rounded({key: statistics.fmean(d[key] for d in figures) for key in KEYS}),
        "range": {
            key: [round(min(d[key] for d in figures), 4), round(max(d[key] for d in figures), 4)]
            for key in KEYS
        },
    }


def limits(
    figures: Mapping[str, Any], budget: Budget, supply: Sequence[float] | None
) -> dict[str, float | None]:
    """What bounds the day's figures on both sides, live and offline, as shares of the budget.

    - ``achievable_eod_ratio``: what the simulator's supply (spend at rate 1, hour by
      hour) lets a paced day spend, each hour's shortfall carried forward
      (``pacing.actual.achievable``); None without a calibration.
    - ``max_bid_tail_ratio``: what leases can leave unspent at the end of the budget: a
      node bids only while its lease covers one impression at the maximum bid, and the
      rest goes to as few nodes as that takes (``pacing.lease.tail_holders``), down to
      one node holding less than one such impression.
    - ``hourly_noise_ratio``: the relative spread of an hour's impressions (Poisson:
      1 / sqrt(the day's wins / 24)); an hour's +-10% band is noise when it is larger.
    """
    daily = budget.daily_budget_micros
    achievable_eod = None
    if supply:
        target = [round(t) for t in figures["target_by_hour"]]
        achievable_eod = round(sum(achievable(target, supply)) / daily, 4)
    wins = figures.get("wins") or 0
    return {
        "achievable_eod_ratio": achievable_eod,
        "max_bid_tail_ratio": round(min(budget.max_cost_micros / daily, 1.0), 4),
        "hourly_noise_ratio": round((24 / wins) ** 0.5, 4) if wins else None,
    }


def sized(
    campaigns: Sequence[Campaign],
    calibration: Mapping[str, Mapping[str, Any]],
    supply_ratio: float,
    chunks_per_day: int,
    *,
    min_wins: float | None = None,
    curve_from_supply: bool = False,
) -> list[Campaign]:
    """Each campaign with the daily budget its calibrated spend at rate 1 covers
    ``supply_ratio`` times: budgets that bind on that stream.

    Kept are the campaigns that won at least ``min_wins`` impressions in the calibration
    (default ``MIN_DAY_WINS x supply_ratio``: fewer leave each hour a handful, noise, not
    pacing) and whose lease chunk (budget / ``chunks_per_day``, i.e. nodes x chunk
    periods) covers one impression at the maximum bid: a node admits a bid only when its
    chunk covers that. ``curve_from_supply``: each kept campaign's pacing curve becomes
    its calibrated spend per hour, the forecast of its supply (a curve the supply falls
    short of in some hours leaves those hours off the curve whatever pacing does).
    """
    if not supply_ratio > 0 or chunks_per_day < 1:
        raise ValueError("--supply-ratio must be positive and --nodes, --chunk-periods at least 1")
    least_wins = MIN_DAY_WINS * supply_ratio if min_wins is None else min_wins
    out = []
    for campaign in campaigns:
        calibrated = calibration.get(campaign.id) or {}
        budget = round(calibrated.get("spend_micros", 0) / supply_ratio)
        if calibrated.get("wins", 0) < least_wins:
            continue
        if budget // chunks_per_day < cost_of(campaign.max_bid_cpm_micros):
            continue
        changes: dict[str, Any] = {"daily_budget_micros": budget}
        if curve_from_supply:
            changes["pacing_curve"] = _supply_curve(campaign.id, calibrated)
        out.append(dataclasses.replace(campaign, **changes))
    return out


def _supply_curve(campaign_id: str, calibrated: Mapping[str, Any]) -> tuple[float, ...]:
    by_hour = calibrated.get("spend_by_hour")
    if not by_hour:
        raise ValueError(f"the --supply-from report has no spend by hour for {campaign_id}")
    return Curve.from_weights(by_hour, source=f"{campaign_id}'s spend by hour").weights


def live_above_supply(
    spend: Sequence[float], supply: Sequence[float] | None
) -> dict[str, Any] | None:
    """The hours in which the live day, paced, spent more than the simulator's supply
    at rate 1 (``hours``), and the largest such ratio (``most``): there the simulator
    had less to spend than live met. Without the ``--supply-from`` report's book, that
    supply is its spend with every campaign at rate 1, where the other campaigns take
    requests that this one meets when they are paced; a replay that shed more for load
    adds to it. None without a calibration."""
    if not supply:
        return None
    hours = [h for h, (live, cal) in enumerate(zip(spend, supply, strict=True)) if live > cal]
    most = max((spend[h] / max(supply[h], 1) for h in hours), default=None)
    return {"hours": hours, "most": None if most is None else round(most, 3)}


def _rounded(figures: Mapping[str, float]) -> dict[str, float]:
    return {key: round(value, 4) for key, value in figures.items()}


def render_pacing(section: Mapping[str, Mapping[str, Any]]) -> str:
    """The terminal table: each campaign's live figures beside the simulator's."""
    width = max([len("pacing (live | offline)"), *map(len, section)]) + 2
    lines = [
        f"{'pacing (live | offline)':<{width}}{'supply':>7}  {'EOD spend':>15}"
        f"  {'max cum error':>15}  {'hours in band':>15}"
    ]
    for cid, entry in section.items():
        live, off = entry["live"], entry.get("offline") or {}
        ratio = entry.get("supply_ratio")
        cells = [
            f"{live[key]:>7.1%}|{off[key]:<7.1%}" if key in off else f"{live[key]:>7.1%}|{'-':<7}"
            for key in KEYS
        ]
        supply = f"{ratio:>6.2f}x" if ratio is not None else f"{'-':>7}"
        lines.append(f"  {cid:<{width - 2}}{supply}  " + "  ".join(cells))
        lines.append(f"    {limits_text(entry.get('limits') or {})}")
        if entry.get("offline_range"):
            low, high = entry["offline_range"]["eod_spend_ratio"]
            lines.append(f"    offline EOD spend over its simulated days: {low:.1%}-{high:.1%}")
        if entry.get("offline_admitted"):
            lines.append(
                "    offline on the supply live let through (its load shed minute by minute):"
                f" {admitted_text(entry)}"
            )
        above = entry.get("live_above_offline_supply")
        if above and above["hours"]:
            lines.append(
                f"    live spent more than the simulator's supply in {len(above['hours'])}"
                f" hours (up to {above['most']:.2f}x): {_SHORT[entry.get('offline_supply')]}"
            )
        capped = entry.get("capped_share") or {}
        live, at_rate_1 = capped.get("live"), capped.get("supply_from")
        if live is not None and at_rate_1 is not None and at_rate_1 > live + CAPPED_GAP:
            lines.append(
                f"    frequency caps refused {at_rate_1:.1%} of its eligible requests in the"
                f" --supply-from replay, {live:.1%} live: bidding on every request it reaches"
                " its caps sooner, so the simulator's supply is short"
            )
            if capped.get("widest_hours"):
                hours = ", ".join(
                    f"{h['hour']:02d}h {h['supply_from']:.0%} against {h['live']:.0%}"
                    for h in capped["widest_hours"]
                )
                lines.append(f"      widest apart in hours {hours}")
    lines.append(f"  supply: {supply_text(section)}; binds from 1.1x")
    return "\n".join(lines)


_SHORT = {
    "spend": "the other campaigns bid at rate 1 in the --supply-from replay",
    "book": "Poisson noise, caps reached sooner at rate 1 (below), or supply the"
    " --supply-from replay shed for load",
    None: "",
}


def supply_text(section: Mapping[str, Mapping[str, Any]]) -> str:
    """Where the simulator's supply came from, in words."""
    sources = {entry.get("offline_supply") for entry in section.values()}
    if "book" in sources:
        return (
            "the simulator's spend at rate 1 over the budget, read from the --supply-from"
            " report's book while the other campaigns are paced"
        )
    return "the simulator's spend at rate 1 over the budget: the --supply-from replay's"


def render_loop(settings: Mapping[str, Any]) -> str:
    """The control loop's delay the offline days ran with (``loop_delay_ticks``)."""
    delay = settings.get("loop_delay_ticks")
    if delay is None:
        return "  control loop: the simulator read the spend at once"
    return (
        f"  control loop: the simulator reads the spend {delay:.2f} tick behind, as live"
        " (the producer's delay and a node's wait for its next lease): an expired lease"
        " stays in the cap a tick longer on both sides"
    )


def limits_text(found: Mapping[str, float | None]) -> str:
    """``limits`` in words: what bounds the day's figures on both sides."""
    reach, tail = found.get("achievable_eod_ratio"), found.get("max_bid_tail_ratio")
    noise = found.get("hourly_noise_ratio")
    parts = [
        f"supply allows {reach:.1%} of the budget" if reach is not None else None,
        f"leases at the maximum bid can leave {tail:.1%} unspent" if tail else None,
        f"an hour's spend varies +-{noise:.0%} (Poisson)" if noise is not None else None,
    ]
    return "limits: " + ("; ".join(p for p in parts if p) or "-")


__all__ = [
    "BINDS_AT", "CAPPED_GAP", "KEYS", "admitted_figures", "admitted_text", "capped_share",
    "limits", "limits_text", "live_above_supply", "pacing_section", "render_loop",
    "render_pacing", "sized", "supply_text", "widest_capped_hours",
]  # fmt: skip
