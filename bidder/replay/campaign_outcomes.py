"""Per-campaign outcomes of a replay: what each campaign bid, won and spent.

Where each figure comes from (``SOURCES``, also written into the JSON report):

- bids and bid prices: the bidder's 200 answers, by ``Bid.cid``;
- wins, clearing prices, spend and eCPM: the exchange model that the replay runs on
  every answer (``bidder.bidstream.auction``): the spend the exchange would bill;
- daily budgets and pacing curves: the campaign file given to ``replay``
  (``--campaigns``); the target is the budget's share, along the campaign's curve,
  of the simulated hours the measured requests span (their ``ts``). A stream
  compresses a day into minutes while the bidder paces on its own clock, so spend
  against this target reads as "how the day's shape was followed", not as pacing error;
- requests eligible, capped no-bids and average shading: the bidder's
  ``X-Campaign-Trace`` answer header (``bidder.pipeline.campaign_trace``), which the
  replay asks for on every request unless told not to. They are null when no answer
  carried it (the replay did not ask, or the bidder at ``--target`` does not answer it);
- clicks and CTR: the stream's recorded clicks (``click``) on the wins its recorded
  prices decided (``auction_totals``): the recorded model's; a win the synthetic model
  decided, or on a line without a click record, counts no click and is not in the CTR;
- impressions over a cap: the audit of the won bids' notice tokens against the
  campaign file's caps (``over_cap``).

Counts are of the measured requests only, like the totals they add up to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bidder.bidstream.auction import Settlement
from bidder.core.campaigns import Campaign
from bidder.core.ledger import cost_of
from bidder.pipeline.campaign_trace import TraceFigures
from bidder.replay.auction_totals import ctr
from bidder.replay.over_cap import OverCapTally
from pacing.curves import (
    BUILTIN,
    DAY_S,
    HOUR_S,
    Curve,
    CurveError,
    day_of,
    hour_of_day,
    resolve_curve,
)

NO_CID = "(no cid)"
"""The row of bids that name no campaign."""

SOURCES = {
    "bids": "bidder answers (Bid.cid, Bid.price)",
    "wins_spend_ecpm": "replay exchange model (auction on every answer)",
    "budget_target": "campaign file (--campaigns): daily budget along its pacing curve"
    " over the simulated hours of the measured requests",
    "requests_eligible": "bidder answers (X-Campaign-Trace: campaigns its eligibility stage"
    " kept for the request)",
    "capped_no_bids": "bidder answers (X-Campaign-Trace: campaigns every candidate of which"
    " was over a frequency cap)",
    "avg_shading": "bidder answers (X-Campaign-Trace: bid price / the campaign's unshaded"
    " price, averaged over its bids; 1 is unshaded)",
    "clicks_ctr": "stream's recorded clicks on wins its recorded prices decided (recorded"
    " model only; a line without a click record counts none); CTR: clicks / such wins",
    "over_cap": "audit of the won bids' notice tokens against the campaign file's caps"
    " (null: not audited)",
}


@dataclass(frozen=True, slots=True)
class Budget:
    daily_budget_micros: int
    curve: Curve | None
    """None when the campaign names a curve the replay does not know."""
    max_cost_micros: int = 0
    """The most one impression can cost (at the maximum bid): a lease below it never spends."""


def budgets_of(
    campaigns: Iterable[Campaign], named: Mapping[str, Curve] = BUILTIN
) -> dict[str, Budget]:
    """Each campaign's daily budget and resolved pacing curve, by id."""
    budgets = {}
    for campaign in campaigns:
        try:
            curve: Curve | None = resolve_curve(campaign.pacing_curve, named)
        except CurveError:
            curve = None
        budgets[campaign.id] = Budget(
            campaign.daily_budget_micros, curve, cost_of(campaign.max_bid_cpm_micros)
        )
    return budgets


@dataclass(slots=True)
class CampaignOutcome:
    bids: int = 0
    bid_cpm_sum: float = 0.0
    wins: int = 0
    won_bid_cpm_sum: float = 0.0
    spend_micros: int = 0
    spend_by_hour: list[int] = field(default_factory=lambda: [0] * 24)
    """Spend by simulated hour of day (the won request's ``ts``)."""
    eligible_by_hour: list[int] = field(default_factory=lambda: [0] * 24)
    capped_by_hour: list[int] = field(default_factory=lambda: [0] * 24)
    """Eligible and capped answers by simulated hour of day (the request's ``ts``)."""
    shading_sum: float = 0.0
    shaded_bids: int = 0
    clicks: int = 0
    click_recorded_wins: int = 0
    """Wins that carry the line's recorded click, clicked or not (``Win.clicked``)."""

    @property
    def win_rate(self) -> float:
        return self.wins / self.bids if self.bids else 0.0

    @property
    def ecpm_usd(self) -> float:
        """What 1,000 won impressions cost on average (spend per win is CPM / 1000)."""
        return self.spend_micros / self.wins / 1000 if self.wins else 0.0


@dataclass(slots=True)
class CampaignOutcomes:
    budgets: dict[str, Budget] = field(default_factory=dict)
    by_campaign: dict[str, CampaignOutcome] = field(default_factory=dict)
    first_ts: int | None = None
    last_ts: int | None = None
    """The measured requests' simulated time span (ms)."""
    traced: int = 0
    """Measured answers that carried the bidder's campaign trace."""
    over_cap: OverCapTally = field(default_factory=OverCapTally)

    def see(self, ts: int) -> None:
        """A measured request's simulated instant: widens the span targets cover."""
        if self.first_ts is None or ts < self.first_ts:
            self.first_ts = ts
        if self.last_ts is None or ts > self.last_ts:
            self.last_ts = ts

    def count(self, settlement: Settlement, ts: int) -> None:
        """A measured answer's bids and wins; ``ts``: its request's simulated instant."""
        for offer in settlement.offers:
            outcome = self._outcome(offer.cid)
            outcome.bids += 1
            outcome.bid_cpm_sum += offer.price
        hour = hour_of_day(ts)
        for win in settlement.wins:
            outcome = self._outcome(win.cid)
            outcome.wins += 1
            outcome.won_bid_cpm_sum += win.bid_price
            outcome.spend_micros += win.spend_micros
            outcome.spend_by_hour[hour] += win.spend_micros
            if win.clicked is not None:
                outcome.click_recorded_wins += 1
                outcome.clicks += win.clicked

    def note_trace(self, trace: TraceFigures, ts: int) -> None:
        """A measured answer's ``X-Campaign-Trace``, read back; ``ts``: its request's
        simulated instant."""
        self.traced += 1
        hour = hour_of_day(ts)
        for cid in trace.eligible:
            self._outcome(cid).eligible_by_hour[hour] += 1
        for cid in trace.capped:
            self._outcome(cid).capped_by_hour[hour] += 1
        for cid, ratio in trace.shading:
            outcome = self._outcome(cid)
            outcome.shading_sum += ratio
            outcome.shaded_bids += 1

    def _outcome(self, cid: str) -> CampaignOutcome:
        key = cid or NO_CID
        found = self.by_campaign.get(key)
        if found is None:
            found = self.by_campaign[key] = CampaignOutcome()
        return found

    def names(self) -> list[str]:
        """Every campaign with a budget, a bid or an eligible request, sorted."""
        return sorted(set(self.budgets) | set(self.by_campaign))

    def target_by_hour(self, curve: Curve, budget_micros: int) -> list[float] | None:
        """The budget's share per simulated hour inside the measured span; None when the
        span is unknown or crosses midnight (the curve is one day's)."""
        if self.first_ts is None or self.last_ts is None:
            return None
        if day_of(self.first_ts) != day_of(self.last_ts):
            return None
        start = self.first_ts / 1000 % DAY_S
        end = start + (self.last_ts - self.first_ts) / 1000
        shares = [
            curve.share_at(min(end, (h + 1) * HOUR_S)) - curve.share_at(max(start, h * HOUR_S))
            for h in range(24)
        ]
        return [budget_micros * max(0.0, share) for share in shares]


def outcomes_json(outcomes: CampaignOutcomes) -> dict[str, Any]:
    """``{campaign id: figures}``; every key present, null where a figure is unknown."""
    over_cap = outcomes.over_cap.by_campaign()
    return {name: _campaign_json(outcomes, name, over_cap) for name in outcomes.names()}


def _campaign_json(
    outcomes: CampaignOutcomes, name: str, over_cap: Mapping[str, int]
) -> dict[str, Any]:
    o = outcomes.by_campaign.get(name) or CampaignOutcome()
    budget = outcomes.budgets.get(name)
    target = None
    if budget is not None and budget.curve is not None:
        target = outcomes.target_by_hour(budget.curve, budget.daily_budget_micros)
    target_total = round(sum(target)) if target is not None else None
    return {
        "bids": o.bids,
        "wins": o.wins,
        "win_rate": round(o.win_rate, 6),
        "spend_micros": o.spend_micros,
        "ecpm_usd": round(o.ecpm_usd, 6),
        "avg_bid_cpm_usd": round(o.bid_cpm_sum / o.bids, 6) if o.bids else 0.0,
        "paid_share_of_bid": _ratio(o.spend_micros / 1000, o.won_bid_cpm_sum),
        "daily_budget_micros": budget.daily_budget_micros if budget else None,
        "spend_share_of_budget": _ratio(o.spend_micros, budget.daily_budget_micros)
        if budget
        else None,
        "target_micros": target_total,
        "spend_vs_target": _ratio(o.spend_micros, target_total) if target_total else None,
        "spend_by_hour": list(o.spend_by_hour),
        "target_by_hour": [round(t) for t in target] if target is not None else None,
        "clicks": o.clicks,
        "click_recorded_wins": o.click_recorded_wins,
        "ctr": ctr(o.clicks, o.click_recorded_wins),
        **_traced(outcomes.traced, o),
        "over_cap": over_cap.get(name),
    }


def _traced(traced: int, o: CampaignOutcome) -> dict[str, Any]:
    """The figures of the bidder's campaign trace; null when no answer carried it."""
    shading = round(o.shading_sum / o.shaded_bids, 6) if o.shaded_bids else None
    return {
        "requests_eligible": sum(o.eligible_by_hour) if traced else None,
        "capped_no_bids": sum(o.capped_by_hour) if traced else None,
        "requests_eligible_by_hour": list(o.eligible_by_hour) if traced else None,
        "capped_no_bids_by_hour": list(o.capped_by_hour) if traced else None,
        "avg_shading": shading if traced else None,
    }


def _ratio(part: float, whole: float | None) -> float | None:
    return round(part / whole, 9) if whole else None


def render_campaigns(campaigns: Mapping[str, Mapping[str, Any]]) -> str:
    """The terminal section, from the JSON figures (``outcomes_json``)."""
    width = max([len("per campaign"), *map(len, campaigns)]) + 2
    lines = [
        f"{'per campaign':<{width}}{'bids':>8}  {'wins':>7}  {'win rate':>8}"
        f"  {'spend USD':>11}  {'of budget':>9}  {'vs target':>9}  {'eCPM':>8}"
    ]
    for name, c in campaigns.items():
        lines.append(
            f"  {name:<{width - 2}}{c['bids']:>8,}  {c['wins']:>7,}  {c['win_rate']:>8.2%}"
            f"  {c['spend_micros'] / 1_000_000:>11.6f}  {_pct(c['spend_share_of_budget']):>9}"
            f"  {_pct(c['spend_vs_target']):>9}  {c['ecpm_usd']:>8.4f}"
        )
    lines.append(
        "  bids: the answers; wins, spend, eCPM: the exchange model; budget and target: --campaigns"
    )
    lines.append("")
    lines.append(
        f"{'per campaign':<{width}}{'eligible':>9}  {'bids':>8}  {'capped':>7}"
        f"  {'shading':>7}  {'over cap':>8}"
    )
    for name, c in campaigns.items():
        lines.append(
            f"  {name:<{width - 2}}{_count(c['requests_eligible']):>9}  {c['bids']:>8,}"
            f"  {_count(c['capped_no_bids']):>7}  {_ratio_text(c['avg_shading']):>7}"
            f"  {_count(c['over_cap']):>8}"
        )
    lines.append(
        "  eligible, capped (no bid: every candidate over a cap), shading (bid / unshaded):"
        " the bidder's X-Campaign-Trace; over cap: the won bids' tokens against the caps"
    )
    return "\n".join(lines + _click_lines(campaigns, width))


def _click_lines(campaigns: Mapping[str, Mapping[str, Any]], width: int) -> list[str]:
    """The recorded clicks per campaign; nothing when no win carried a click record."""
    if not any(c.get("click_recorded_wins") for c in campaigns.values()):
        return []
    lines = [
        "",
        f"{'per campaign':<{width}}{'wins':>7}  {'recorded':>8}  {'clicks':>6}  {'CTR':>7}",
    ]
    for name, c in campaigns.items():
        lines.append(
            f"  {name:<{width - 2}}{c['wins']:>7,}  {c['click_recorded_wins']:>8,}"
            f"  {c['clicks']:>6,}  {_pct(c['ctr']):>7}"
        )
    lines.append(
        "  clicks: the stream's recorded clicks on the wins its recorded prices decided"
        " (recorded model); recorded: those wins, CTR = clicks / recorded; a line without"
        " a click record counts no click"
    )
    return lines


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.3g}%"
