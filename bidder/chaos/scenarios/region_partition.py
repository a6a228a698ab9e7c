"""``region_partition``: two regions cut apart, then healed: counts converge, none twice.

What is injected: two regions ("eu", "us"), one bidder and one counter store each, a
stream with heavy users spread across them by SSP (a person reaching the DSP through
two SSPs is served in both), replayed on its own timeline. The replicators between
the stores are cut for the middle third of the replay, then healed. Budgets, leases,
ids and notice dedup are global (one store, as in production across regions), so only
the frequency counters are split. The campaign is the measurement's
(``bidder.chaos.region_delay``): a campaign day cap of 3, class ``tight``.

Checked: 0 5xx and the answers within the deadline; every acknowledged bill in the
ledger and the totals equal to it (``audit_ledger``); no budget passed; no replicator
applied anything while cut; the lag grew to about the cut's length and raised the
lag alert (``bidsim_fcap_replication_lag_alert``); after the heal the replicators
caught up (``recovery_s``) and, for every person billed, the merged count in *each*
region equals the impressions billed (nothing lost, nothing counted twice); every
impression above the cap is explained by bids in flight or by what the other region
counted within the cut (``fcap.region_audit``: ``over_cap_beyond_delay`` is 0).
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

import orjson
import prometheus_client

from bidder.chaos.harness import ScenarioOptions, records, stream_file
from bidder.chaos.region_delay import REGIONS, campaigns
from bidder.chaos.regions import (
    RegionalLive,
    audit_regions,
    catch_up,
    regional_bidders,
    replay_spread,
)
from bidder.chaos.result import ScenarioResult, pass_summary, record_answers
from bidder.chaos.steps import Run, audit_ledger, check_budgets, run_on_stack
from bidder.core.campaign_docs import campaign_to_doc
from bidder.replay.ledger_audit import acknowledged_bills
from bidder.replay.spread import by_ssp
from bidder.stack.regions import LocalRegions
from fcap.replicate import Link

NAME = "region_partition"
INJECTED = "replication between two regions' counter stores cut, then healed"
RATE = 150.0
REQUESTS = {True: 1200, False: 4800}
LAG_ALERT_S = 1.0
RECOVERY_BOUND_S = 5.0
LIMIT = 3


def run(options: ScenarioOptions) -> ScenarioResult:
    return run_on_stack(NAME, INJECTED, options, _run)


async def _run(run: Run) -> None:
    book = run.workdir / "campaigns.json"
    docs = [campaign_to_doc(c) for c in campaigns(LIMIT)]
    book.write_bytes(orjson.dumps({"version": 1, "campaigns": docs}))
    requests = REQUESTS[run.short]
    stream = stream_file(
        run.workdir, "heavy", requests, seed=61, mean_rate=RATE, heavy_users=10, heavy_share=0.3
    )
    parts = by_ssp(records(stream), REGIONS)
    third_s = requests / RATE / 3
    link = Link(lag_alert_s=LAG_ALERT_S)
    with LocalRegions(REGIONS) as regions:
        async with regional_bidders(
            run.stack, regions, run.workdir, link,
            campaigns_path=book, workers=1, deadline_ms=50.0, fcap_check_timeout_ms=25.0,
        ) as live:  # fmt: skip
            cut = asyncio.create_task(_cut(live, third_s))
            results = await replay_spread(live, parts, timeout_ms=1000.0)
            watch = await cut
            await catch_up(live)
            acknowledged = sum(
                [await acknowledged_bills(b.admin_url) for b in live.bidders.values()]
            )
            first = next(iter(live.settings.values()))
            money = await audit_ledger(first, acknowledged, run.scenario, run.checks)
            audit = await audit_regions(live, run.stack, regions, book, round(third_s * 1000))
    scenario, checks = run.scenario, run.checks
    scenario.figures.update(
        passes={name: pass_summary(r) for name, r in results.items()},
        caps=audit.figures(), partition=dataclasses.asdict(watch), partition_s=round(third_s, 2),
    )  # fmt: skip
    scenario.recovery_s = watch.recovery_s
    record_answers(checks, scenario, list(results.values()), run.options.min_ratio())
    check_budgets(scenario, checks, money, book)
    checks.expect("applied_while_cut", watch.applied_while_cut, "==", 0)
    checks.expect("peak_lag_s", watch.peak_lag_s, ">=", 0.8 * third_s)
    checks.holds(
        "lag_alert_raised", watch.alert_raised, watch.alert_raised, "alert gauge 1 while cut"
    )
    checks.expect("recovery_s", scenario.recovery_s, "<=", RECOVERY_BOUND_S)
    checks.expect("users_checked", audit.users_checked, ">", 0)
    checks.holds(
        "merged_counts_equal_billed_in_every_region", audit.users_not_converged or "all equal",
        not audit.users_not_converged, "per person, each region's merged count == billed",
    )  # fmt: skip
    checks.expect("over_cap_beyond_delay", len(audit.over_delivery.beyond_delay), "==", 0)
    checks.expect("reached_limit", audit.over_delivery.overall.reached_limit, ">", 0)


@dataclass(frozen=True, slots=True)
class _Cut:
    applied_while_cut: int
    peak_lag_s: float
    alert_raised: bool
    recovery_s: float


async def _cut(live: RegionalLive, third_s: float) -> _Cut:
    """Cut the replicators for the middle third of the replay, watching the lag and its
    alert; then heal and time the catch-up."""
    await asyncio.sleep(third_s)
    live.partition()
    loop = asyncio.get_running_loop()
    end = loop.time() + third_s
    # An apply already sent when the link is cut still lands: count from 0.1 s on.
    await asyncio.sleep(0.1)
    applied = sum(r.applied for r in live.replicators)
    peak, alert = 0.0, False
    while loop.time() < end:
        await asyncio.sleep(0.1)
        peak = max(peak, live.lag_s)
        alert = alert or _alert_raised()
    applied_while_cut = sum(r.applied for r in live.replicators) - applied
    live.heal()
    recovery_s = await catch_up(live)
    return _Cut(applied_while_cut, round(peak, 2), alert, round(recovery_s, 2))


def _alert_raised() -> bool:
    return any(
        prometheus_client.REGISTRY.get_sample_value(
            "bidsim_fcap_replication_lag_alert", {"source": a, "dest": b}
        )
        == 1
        for a, b in ((REGIONS[0], REGIONS[1]), (REGIONS[1], REGIONS[0]))
    )
