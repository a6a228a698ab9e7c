"""What a replay measured, and how it is shown: a text table and a stable JSON shape.

Latencies live in two HdrHistograms (microseconds, 1 us .. 60 s, 3 significant
digits): ``corrected`` from each request's *intended* send time (coordinated omission
corrected: queueing in the client and a late scheduler count against the bidder's
latency, as they would for an exchange), ``uncorrected`` from the actual send. Both
hold answered requests and timeouts (a timeout is recorded at the moment it was
abandoned: a lower bound); transport errors are counted, not timed. A p99.9 needs at
least 100,000 samples to mean much (the benchmark protocol); it is always shown, with
``p99_9_reliable`` false below that.

Per supply partner (the record's ``ssp``, sent as ``X-Ssp``) the same measured requests
are split again: counts, statuses, no-bid reasons, and two corrected histograms, one of
every timed request and one of the 204s alone. A partner over its rate limit should get
its 204s fast while the others' latency stays put; the split shows both.

Duplicate auctions (one auction sent through several SSPs, sharing ``source.tid``):
grouped by tid over the answered requests (``_duplicates``), with how many groups got
more than one bid and how many were bid on their best-ranked path; the bids' own
latency (``corrected_200``) is what a dedup hold costs.

Per campaign (``campaign_outcomes``) and per second (``timeline``); docs/replay.md says
where each figure comes from.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from bidder.replay._duplicates import DuplicateTally
from bidder.replay.auction_totals import AuctionTotals, auction_json, model_lines
from bidder.replay.campaign_outcomes import (
    SOURCES,
    CampaignOutcomes,
    outcomes_json,
    render_campaigns,
)
from bidder.replay.load_shed import ShedTally
from bidder.replay.pushback import Pushback, pushback_json, render_pushback
from bidder.replay.slowest import SlowestAnswers, render_slowest, slowest_json
from bidder.replay.supply_book import SupplyBook
from bidder.replay.timeline import Timeline, timeline_json
from bidder.replay.viewability import ViewTally, render_views, view_json

LOWEST_US = 1
HIGHEST_US = 60_000_000
SIGNIFICANT_DIGITS = 3
RELIABLE_P99_9_SAMPLES = 100_000
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99_9", 99.9))
STATUS_CLASSES = ("200", "204", "5xx", "other")


def new_latency_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record_latency(histogram: HdrHistogram, micros: int) -> None:
    """Record, clamped to the histogram's range (out-of-range values would be dropped)."""
    histogram.record_value(min(max(micros, LOWEST_US), HIGHEST_US))


@dataclass(slots=True)
class SspResult:
    """One supply partner's share of the measured requests."""

    requests: int = 0
    status: collections.Counter[int] = field(default_factory=collections.Counter)
    nbr_reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    corrected: HdrHistogram = field(default_factory=new_latency_histogram)
    """Every timed request (answers and timeouts), as in the overall histogram."""
    corrected_204: HdrHistogram = field(default_factory=new_latency_histogram)
    """The 204 answers alone: how fast a no-bid (a throttled one, say) comes back."""
    timeouts: int = 0

    @property
    def throttled(self) -> int:
        return self.nbr_reasons["throttled"]

    @property
    def no_bid_share(self) -> float:
        return self.status[204] / self.requests if self.requests else 0.0

    def count_answer(self, status: int, reason: str | None, corrected_us: int) -> None:
        self.status[status] += 1
        record_latency(self.corrected, corrected_us)
        if status == 204:
            self.nbr_reasons[reason or "unlabelled"] += 1
            record_latency(self.corrected_204, corrected_us)

    def count_timeout(self, corrected_us: int) -> None:
        self.timeouts += 1
        record_latency(self.corrected, corrected_us)


@dataclass(slots=True)
class ReplayResult:
    """Totals of the measured part of a replay (warm-up requests are only counted)."""

    deadline_ms: float
    requests: int = 0
    warmup_requests: int = 0
    duration_s: float = 0.0
    """From the first to the last measured send."""
    elapsed_s: float = 0.0
    """The whole replay, warm-up and drain included."""
    status: collections.Counter[int] = field(default_factory=collections.Counter)
    nbr_reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    corrected: HdrHistogram = field(default_factory=new_latency_histogram)
    uncorrected: HdrHistogram = field(default_factory=new_latency_histogram)
    within_deadline: int = 0
    within_deadline_from_write: int = 0
    """Answers (200/204) within the deadline of their request's write: the uncorrected
    count, which leaves out everything before the write (the client's late sends, a wait
    for a connection). A reading aid beside ``within_deadline``, which stays the figure:
    on a shared machine the client's own delays are not the bidder's."""
    timeouts: int = 0
    transport_errors: int = 0
    late_sends: int = 0
    max_send_lag_ms: float = 0.0
    auction: AuctionTotals = field(default_factory=AuctionTotals)
    ssps: dict[str, SspResult] = field(default_factory=dict)
    """Per supply partner, by name."""
    corrected_200: HdrHistogram = field(default_factory=new_latency_histogram)
    """The bids (200s) alone, corrected."""
    corrected_200_held: HdrHistogram = field(default_factory=new_latency_histogram)
    """The bids whose copy held its claim for a better-placed one (``X-Dedup-Held``)."""
    corrected_200_not_held: HdrHistogram = field(default_factory=new_latency_histogram)
    """The other bids."""
    duplicates: DuplicateTally = field(default_factory=DuplicateTally)
    """Auctions sent through several SSPs (give it the bidder's ``PathPolicy``)."""
    campaigns: CampaignOutcomes = field(default_factory=CampaignOutcomes)
    """Per campaign (give it the campaigns' budgets to get budget and target figures)."""
    ledger: dict[str, Any] | None = None
    """The money audit after the replay (``ledger_audit``), when asked for."""
    supply_book: SupplyBook = field(default_factory=SupplyBook)
    """Per hour, who would have bought each imp had the campaigns above it not bid."""
    timeline: Timeline = field(default_factory=Timeline)
    shed: ShedTally = field(default_factory=ShedTally)
    pushback: Pushback = field(default_factory=Pushback)
    views: ViewTally = field(default_factory=ViewTally)
    slowest: SlowestAnswers = field(default_factory=SlowestAnswers)
    warmup_s: float = 0.0

    def count_copy(
        self,
        ssp: str,
        body: bytes,
        status: int,
        reason: str | None,
        corrected_us: int,
        held: bool = False,
    ) -> None:
        """A measured answer's part in the duplicate-auctions section (``held``: the
        bidder held its claim before bidding)."""
        if status == 200:
            record_latency(self.corrected_200, corrected_us)
            apart = self.corrected_200_held if held else self.corrected_200_not_held
            record_latency(apart, corrected_us)
        self.duplicates.count(ssp, body, status, reason)

    def ssp(self, name: str) -> SspResult:
        """``name``'s figures, created on first use."""
        found = self.ssps.get(name)
        if found is None:
            found = self.ssps[name] = SspResult()
        return found

    @property
    def rate_rps(self) -> float:
        """Achieved send rate: gaps between measured sends over their span."""
        return (
            (self.requests - 1) / self.duration_s
            if self.requests > 1 and self.duration_s > 0
            else 0.0
        )

    @property
    def samples(self) -> int:
        return int(self.corrected.get_total_count())

    @property
    def within_deadline_share(self) -> float:
        return self.within_deadline / self.requests if self.requests else 0.0

    @property
    def within_deadline_from_write_share(self) -> float:
        return self.within_deadline_from_write / self.requests if self.requests else 0.0


def status_classes(status: collections.Counter[int]) -> dict[str, int]:
    """{"200", "204", "5xx", "other"} counts; every key always present."""
    classes = dict.fromkeys(STATUS_CLASSES, 0)
    for code, count in status.items():
        key = str(code) if code in (200, 204) else "5xx" if 500 <= code < 600 else "other"
        classes[key] += count
    return classes


def latency_ms(histogram: HdrHistogram) -> dict[str, Any]:
    """p50/p90/p99/p99_9/max in milliseconds (0.0 when empty)."""
    empty = histogram.get_total_count() == 0
    summary: dict[str, Any] = {
        name: 0.0 if empty else histogram.get_value_at_percentile(pct) / 1000
        for name, pct in PERCENTILES
    }
    summary["max"] = 0.0 if empty else histogram.get_max_value() / 1000
    return summary


def to_json(result: ReplayResult) -> dict[str, Any]:
    """The machine-readable summary; keys are stable (scripts and docs read them)."""
    return {
        "requests": result.requests,
        "warmup_requests": result.warmup_requests,
        "duration_s": round(result.duration_s, 3),
        "elapsed_s": round(result.elapsed_s, 3),
        "rate_rps": round(result.rate_rps, 1),
        "status": status_classes(result.status),
        "status_codes": {str(code): n for code, n in sorted(result.status.items())},
        "nbr_reasons": dict(result.nbr_reasons.most_common()),
        "samples": result.samples,
        "latency_ms": {
            "corrected": latency_ms(result.corrected),
            "uncorrected": latency_ms(result.uncorrected),
            "corrected_200": latency_ms(result.corrected_200),
            "corrected_200_held": latency_ms(result.corrected_200_held),
            "corrected_200_not_held": latency_ms(result.corrected_200_not_held),
        },
        "bids_held": result.corrected_200_held.get_total_count(),
        "p99_9_reliable": result.samples >= RELIABLE_P99_9_SAMPLES,
        "within_deadline_share": round(result.within_deadline_share, 6),
        "within_deadline_from_write_share": round(result.within_deadline_from_write_share, 6),
        "deadline_ms": result.deadline_ms,
        "timeouts": result.timeouts,
        "transport_errors": result.transport_errors,
        "late_sends": result.late_sends,
        "max_send_lag_ms": round(result.max_send_lag_ms, 3),
        "auction": auction_json(result.auction),
        "ssps": {name: ssp_json(result.ssps[name]) for name in sorted(result.ssps)},
        "duplicate_auctions": result.duplicates.summary().to_dict(),
        "campaigns": outcomes_json(result.campaigns),
        "campaign_sources": SOURCES,
        "campaign_traced_answers": result.campaigns.traced,
        "supply_book": result.supply_book.json(),
        "ledger": result.ledger,
        "timeline": timeline_json(result.timeline, result.warmup_s),
        **result.shed.json(),
        "pushback": pushback_json(result.pushback, result.requests, result.auction.spend_micros),
        "viewability": view_json(result.views),
        "slowest_answers": slowest_json(result.slowest),
        "latency_histograms": {
            name: getattr(result, name).encode().decode() for name in ("corrected", "uncorrected")
        },
    }


def ssp_json(ssp: SspResult) -> dict[str, Any]:
    return {
        "requests": ssp.requests,
        "status": status_classes(ssp.status),
        "no_bid_share": round(ssp.no_bid_share, 6),
        "throttled": ssp.throttled,
        "timeouts": ssp.timeouts,
        "nbr_reasons": dict(ssp.nbr_reasons.most_common()),
        "latency_ms": {
            "corrected": latency_ms(ssp.corrected),
            "corrected_204": latency_ms(ssp.corrected_204),
        },
    }


def render_table(result: ReplayResult) -> str:
    """A readable report for a terminal."""
    sections = [
        _summary(result),
        _statuses(result),
        _latency(result),
        _per_ssp(result),
        _auction(result),
        render_views(result.views),
        render_pushback(result.pushback, result.requests, result.auction.spend_micros),
        render_campaigns(outcomes_json(result.campaigns)),
        _duplicate_auctions(result),
        render_slowest(result.slowest),
    ]
    return "\n\n".join(sections) + "\n"


def _summary(result: ReplayResult) -> str:
    return "\n".join(
        [
            f"requests        {result.requests:>10,}"
            f"   (+{result.warmup_requests:,} warm-up, not measured)",
            f"duration        {result.duration_s:>10.2f} s  (elapsed {result.elapsed_s:.2f} s)",
            f"achieved rate   {result.rate_rps:>10,.1f} req/s",
            f"late sends      {result.late_sends:>10,}"
            f"   (> 1 ms behind schedule; max {result.max_send_lag_ms:.2f} ms)",
        ]
    )


def _statuses(result: ReplayResult) -> str:
    # Every no-bid reason seen, most frequent first: the table shows where requests die.
    # The name column fits the longest reason label ("schain_unknown_seller").
    lines = [f"{'status':<24}{'count':>7}  {'share':>8}"]
    for name, count in status_classes(result.status).items():
        lines.append(f"  {name:<22}{count:>7,}  {_share(count, result.requests):>8}")
    for name, count in (("timeout", result.timeouts), ("transport err", result.transport_errors)):
        lines.append(f"  {name:<22}{count:>7,}  {_share(count, result.requests):>8}")
    no_bids = sum(result.nbr_reasons.values())
    lines.append(f"{'no-bid reason':<24}{'count':>7}  {'share of 204s':>8}")
    for reason, count in result.nbr_reasons.most_common():
        lines.append(f"  {reason:<22}{count:>7,}  {_share(count, no_bids):>8}")
    return "\n".join(lines)


def _latency(result: ReplayResult) -> str:
    corrected, uncorrected = latency_ms(result.corrected), latency_ms(result.uncorrected)
    lines = [f"latency (ms)    corrected  uncorrected   ({result.samples:,} samples)"]
    for name in (*(name for name, _ in PERCENTILES), "max"):
        label = name.replace("_", ".")
        if name == "p99_9" and result.samples < RELIABLE_P99_9_SAMPLES:
            label += " (*)"
        lines.append(f"  {label:<12}{corrected[name]:>10.3f}  {uncorrected[name]:>11.3f}")
    if result.samples < RELIABLE_P99_9_SAMPLES:
        lines.append(f"  (*) unreliable: fewer than {RELIABLE_P99_9_SAMPLES:,} samples")
    lines.append(
        f"within {result.deadline_ms:g} ms deadline: "
        f"{_share(result.within_deadline, result.requests)} of requests (200/204, corrected)"
    )
    lines.append(
        f"  from the write: {_share(result.within_deadline_from_write, result.requests)}"
        " (uncorrected: the client's own late sends left out)"
    )
    return "\n".join(lines)


def _per_ssp(result: ReplayResult) -> str:
    width = max([len("per SSP"), *map(len, result.ssps)]) + 2
    lines = [
        f"{'per SSP':<{width}}{'requests':>9}  {'204s':>8}  {'throttled':>9}"
        f"  {'p50 ms':>8}  {'p99 ms':>8}  {'204 p99':>8}   (corrected)"
    ]
    for name in sorted(result.ssps):
        ssp = result.ssps[name]
        every, no_bids = latency_ms(ssp.corrected), latency_ms(ssp.corrected_204)
        lines.append(
            f"  {name:<{width - 2}}{ssp.requests:>9,}  {_share(ssp.status[204], ssp.requests):>8}"
            f"  {ssp.throttled:>9,}  {every['p50']:>8.3f}  {every['p99']:>8.3f}"
            f"  {no_bids['p99']:>8.3f}"
        )
    return "\n".join(lines)


def _auction(result: ReplayResult) -> str:
    a = result.auction
    return "\n".join(
        [
            f"auction         bids {a.bids:,}  wins {a.wins:,} ({_share(a.wins, a.bids)} of bids)",
            f"  spend         ${a.spend_micros / 1_000_000:,.6f}  ({a.spend_micros:,} micros)",
            f"  notices       sent {a.notices_sent:,}"
            f"  ok {a.notices_ok:,}  failed {a.notices_failed:,}",
            f"  fcap          {a.unchecked_wins:,} wins bid without a cap check (fail-open)",
            *model_lines(a),
        ]
    )


def _duplicate_auctions(result: ReplayResult) -> str:
    d, bids = result.duplicates.summary(), latency_ms(result.corrected_200)
    held, not_held = (
        latency_ms(h) for h in (result.corrected_200_held, result.corrected_200_not_held)
    )
    n_held = result.corrected_200_held.get_total_count()
    n_not_held = result.corrected_200_not_held.get_total_count()
    return "\n".join(
        [
            f"duplicate auctions  {d.groups:,} groups ({d.copies:,} requests)"
            f"  bid {d.groups_with_bid:,}  answered duplicate_auction {d.duplicate_answers:,}",
            f"  bid once      {d.groups_bid_once:,}"
            f"  ({_share(d.groups_bid_once, d.groups_with_bid)} of bid groups)"
            f"  more than once {d.groups_bid_more_than_once:,}",
            f"  on best path  {d.groups_bid_on_best_bidding_copy:,}"
            f"  ({_share(d.groups_bid_on_best_bidding_copy, d.groups_with_bid)} of bid groups,"
            f" among copies that would bid; {d.groups_bid_on_best_copy:,} among all copies)",
            f"  bids p50 {bids['p50']:.3f} ms  p99 {bids['p99']:.3f} ms (corrected)",
            f"    held {n_held:,}  p50 {held['p50']:.3f} ms  p99 {held['p99']:.3f} ms;"
            f"  not held {n_not_held:,}  p50 {not_held['p50']:.3f} ms"
            f"  p99 {not_held['p99']:.3f} ms",
        ]
    )


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "-"
