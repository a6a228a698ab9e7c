"""Over-delivery as a function of replication delay: one table from one command.

A stream with heavy users (so caps bite within seconds) is spread across two regions
(by SSP by default: a person reaching the DSP through two SSPs lands in both) and
replayed against one bidder per region (``bidder.chaos.regions``), each bidding for
one broad campaign with a campaign day cap (class ``tight``: count on win, every
request reads, fail-closed, so a failed check never bids), with the replicators
applying each change ``delay`` late. Per delay, on a fresh stack: billed impressions,
those above the cap, those above it beyond the bids in flight in one region, those that
neither bids in flight nor the delay explain (``fcap.region_audit``: 0 is the bound
holding), the largest excess of one counter against the most impressions of one person
within one delay (the bound's ``rate x delay``), and whether the counters converged.
A last row routes every person's counters home (``--fcap-home-reads``).

    .venv/bin/python scripts/region_delay.py [--delays-ms 0,500,2000] [--spread ssp|eu=1,us=1]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bidder.bidstream.generator import generate
from bidder.bidstream.stream import StreamRecord, read_stream
from bidder.chaos.regions import audit_regions, catch_up, regional_bidders, replay_spread
from bidder.core.campaign_docs import campaign_to_doc
from bidder.core.campaigns import Campaign, CapPolicy, Creative, FrequencyCap
from bidder.replay.spread import by_share, by_ssp
from bidder.stack.local import LocalStack
from bidder.stack.regions import LocalRegions
from fcap.replicate import Link

REGIONS = ("eu", "us")


@dataclass(frozen=True, slots=True)
class Plan:
    delays_ms: tuple[int, ...] = (0, 500, 2000)
    requests: int = 2_000
    rate: float = 200.0
    seed: int = 5
    heavy_users: int = 10
    heavy_share: float = 0.3
    limit: int = 3
    shares: Mapping[str, float] | None = None
    """Spread by these shares; None: by SSP."""
    home_reads: bool = True
    """Add a row with every person's counters on their home region's store."""


def campaigns(limit: int) -> list[Campaign]:
    creative = Creative(
        id="mrec", format="banner", markup="<b/>", adomain=("regions.example",), w=300, h=250
    )
    return [
        Campaign(
            id="regions-day-cap",
            advertiser="Advertiser regions",
            daily_budget_micros=10_000_000_000,
            base_bid_cpm_micros=5_000_000,
            max_bid_cpm_micros=10_000_000,
            creatives=(creative,),
            frequency_caps=(FrequencyCap("campaign", "fixed", 86_400, limit),),
            cap_policy=CapPolicy.of_class("tight"),
        )
    ]


def spread(records: Sequence[StreamRecord], plan: Plan) -> dict[str, list[StreamRecord]]:
    if plan.shares is None:
        return by_ssp(records, REGIONS)
    return by_share(records, plan.shares)


async def measure(aws_endpoint: str, workdir: Path, plan: Plan) -> list[dict[str, Any]]:
    """One row per delay (and the home-reads row), each on a fresh stack and regions."""
    stream = workdir / "heavy.jsonl.gz"
    generate(
        stream, plan.requests, plan.seed, plan.rate,
        heavy_users=plan.heavy_users, heavy_share=plan.heavy_share,
    )  # fmt: skip
    book = workdir / "campaigns.json"
    docs = [campaign_to_doc(c) for c in campaigns(plan.limit)]
    book.write_bytes(orjson.dumps({"version": 1, "campaigns": docs}))
    parts = spread(list(read_stream(stream)), plan)
    runs = [(delay, False) for delay in plan.delays_ms]
    if plan.home_reads:
        runs.append((max(plan.delays_ms), True))
    rows = []
    for delay_ms, home in runs:
        run_dir = workdir / f"delay-{delay_ms}{'-home' if home else ''}"
        row = await _one(aws_endpoint, run_dir, book, parts, delay_ms, home)
        rows.append({"delay_ms": delay_ms, "home_reads": home, **row})
    return rows


async def _one(
    aws_endpoint: str,
    workdir: Path,
    book: Path,
    parts: Mapping[str, Sequence[StreamRecord]],
    delay_ms: int,
    home_reads: bool,
) -> dict[str, Any]:
    link = Link(delay_s=delay_ms / 1000)
    with LocalStack(aws_endpoint=aws_endpoint) as stack, LocalRegions(REGIONS) as regions:
        async with regional_bidders(
            stack, regions, workdir, link, home_reads,
            campaigns_path=book, workers=1, deadline_ms=50.0, fcap_check_timeout_ms=25.0,
        ) as live:  # fmt: skip
            results = await replay_spread(live, parts)
            converge_s = await catch_up(live)
            audit = await audit_regions(live, stack, regions, book, delay_ms)
    status: dict[int, int] = {}
    for result in results.values():
        for code, n in result.status.items():
            status[code] = status.get(code, 0) + n
    return {
        **audit.figures(),
        "requests": sum(r.requests for r in results.values()),
        "status_5xx": sum(n for code, n in status.items() if code >= 500),
        "timeouts": sum(r.timeouts for r in results.values()),
        "catch_up_s": round(converge_s, 2),
    }


def _delay(r: Mapping[str, Any]) -> str:
    return f"{r['delay_ms']} ms" + (", home reads" if r["home_reads"] else "")


def _billed(r: Mapping[str, Any]) -> str:
    return f"{r['billed']} ({' / '.join(str(v) for v in r['billed_by_region'].values())})"


COLUMNS = (
    ("replication delay", _delay),
    ("billed (eu / us)", _billed),
    ("over cap", lambda r: str(r["over_cap"])),
    ("beyond bids in flight", lambda r: str(r["over_cap_not_in_flight"])),
    ("beyond flight + delay", lambda r: str(r["over_cap_beyond_delay"])),
    ("max excess / one person's impressions in one delay",
     lambda r: f"{r['max_excess']} / {r['peak_within_delay']}"),
    ("users not converged", lambda r: f"{r['users_not_converged']} of {r['users_checked']}"),
)  # fmt: skip


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a Markdown table."""
    head = "| " + " | ".join(name for name, _ in COLUMNS) + " |"
    rule = "| " + " | ".join("---" for _ in COLUMNS) + " |"
    body = ["| " + " | ".join(cell(row) for _, cell in COLUMNS) + " |" for row in rows]
    return "\n".join([head, rule, *body])
