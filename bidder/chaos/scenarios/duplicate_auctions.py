"""``duplicate_auctions``: one bid per impression across SSPs.

What is injected: a duplicate-heavy stream (``duplicate_share`` 0.5: half the auction
events are sent through 2-3 SSPs a few ms apart, sharing ``source.tid``) replayed
against 2 workers. Supply-path dedup (another engineer's work: the claim per tid in
Valkey, NoBid ``duplicate_auction``) must bid each impression at most once, whichever
worker each copy reaches. Read from the replay report's duplicate-auctions section
(groups by tid over the answered requests). A claim Valkey does not answer in time
bids anyway (fail-open, counted ``unavailable`` in ``bidsim_dedup_claims_total``), so
groups bid more than once are checked against that count (0 when Valkey keeps up).

Pending when the feature is absent (no ``duplicate_auction`` no-bid reason, no
``duplicate_share`` in the generator, or no duplicate tally in the replay result).
"""

from __future__ import annotations

import inspect

from bidder.bidstream.generator import generate
from bidder.chaos.harness import ScenarioOptions, live_bidder, records, stream_file
from bidder.chaos.result import ScenarioResult, pass_summary, record_answers
from bidder.chaos.steps import Run, audit_money, check_budgets, replay_pass, run_on_stack
from bidder.core.nobid import NoBid
from bidder.replay.admin_metrics import metric
from bidder.replay.report import ReplayResult

NAME = "duplicate_auctions"
INJECTED = "a stream with half its auctions sent through 2-3 SSPs (shared source.tid)"
RATE = 300.0
REQUESTS = {True: 1500, False: 6000}
DUPLICATE_SHARE = 0.5
CLAIMS = "bidsim_dedup_claims_total"


def missing_feature() -> str | None:
    """What supply-path dedup still lacks here, or None when it is all present."""
    if "DUPLICATE_AUCTION" not in NoBid.__members__:
        return "NoBid has no duplicate_auction reason (supply-path dedup absent)"
    if "duplicate_share" not in inspect.signature(generate).parameters:
        return "the generator has no duplicate_share option"
    if "duplicates" not in getattr(ReplayResult, "__dataclass_fields__", {}):
        return "the replay result has no duplicate-auctions tally"
    return None


def run(options: ScenarioOptions) -> ScenarioResult:
    missing = missing_feature()
    if missing is not None:
        return ScenarioResult(NAME, INJECTED, options.short, pending=missing)
    return run_on_stack(NAME, INJECTED, options, _run, workers=2)


async def _run(run: Run) -> None:
    requests = REQUESTS[run.short]
    path = stream_file(run.workdir, "stream", requests, seed=59, duplicate_share=DUPLICATE_SHARE)
    async with live_bidder(run.stack, run.settings) as live:
        result = await replay_pass(live, records(path), RATE)
        claims = {
            outcome: int(await metric(live.bidder.admin_url, CLAIMS, {"outcome": outcome}))
            for outcome in ("won", "duplicate", "unavailable", "late", "no_tid")
        }
        audit = await audit_money(live, run.scenario, run.checks)
    summary, checks = result.duplicates.summary(), run.checks
    if summary.groups == 0:  # the stream has hundreds: the replayer does not tally them
        run.scenario.pending = "the replayer does not feed the duplicate-auctions tally yet"
    run.scenario.figures.update(
        replay=pass_summary(result), duplicate_auctions=summary.to_dict(), dedup_claims=claims
    )
    record_answers(checks, run.scenario, [result], run.options.min_ratio())
    checks.expect("duplicate_groups", summary.groups, ">", 0)
    # A claim that Valkey did not answer in time bids anyway (fail-open, by design):
    # each group bid twice needs one of those.
    extra = summary.groups_bid_more_than_once
    checks.expect("groups_bid_more_than_once", extra, "<=", claims["unavailable"])
    checks.expect("groups_with_a_bid", summary.groups_with_bid, ">", 0)
    checks.expect("duplicate_auction_nobids", result.nbr_reasons["duplicate_auction"], ">", 0)
    check_budgets(run.scenario, checks, audit)
