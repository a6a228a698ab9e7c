"""Several regions on one machine, for measurements and the partition scenario.

``regional_bidders`` starts one full bidder per region on a shared ``LocalStack`` (the
global store: budgets, leases, ids, notice dedup; moto) and on ``LocalRegions`` (one
counter store per region), each with ``--region`` and its own notice recorder (so each
delivered impression's region is known), the first one with the reconciler. The
replicators run in the caller's loop (``fcap.replicate.mesh``), so a scenario can cut
and heal them. ``replay_spread`` replays one stream spread across the regions
(``bidder.replay.spread``), all parts at once on the stream's own timeline.
``audit_regions`` reads the ledger, judges over-delivery region by region
(``fcap.region_audit``) and checks that every region's counters converged.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bidder.adapters.aws import aws_client
from bidder.adapters.valkey import connect_sync
from bidder.bidstream.stream import StreamRecord
from bidder.chaos.harness import chaos_settings
from bidder.core.campaign_docs import load_campaign_file
from bidder.core.tokens import TokenSigner
from bidder.replay.ledger_audit import distinct, read_ledger
from bidder.replay.notice_recorder import NoticeRecorder
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import ReplayResult
from bidder.serve.region_settings import RegionConfig
from bidder.serve.server import RunningBidder, running_bidder
from bidder.serve.settings import Settings
from bidder.stack.local import LocalStack
from bidder.stack.regions import LocalRegions
from fcap import keys
from fcap.audit import claims_from_notice_urls, counted_times
from fcap.region_audit import (
    RegionalOverDelivery,
    counted_tokens,
    expected_counts,
    merged_count,
    regional_over_delivery,
)
from fcap.replicate import Link, Replicator, mesh
from fcap.rules import build_subjects
from fcap.store import connect

NOTICE_KEY = ("regions", "regions-notice-key-" + "r" * 32)
RESOURCES = ("campaigns_table", "spend_stream", "spend_table", "profiles_table", "archive_bucket")
LEASE_WAIT_TICKS = 2.5
"""Ticks to wait after start, so the bidders without the reconciler hold leases too."""
AUDIT_TIMEOUT_S = 5.0
"""Per read of a region's counters in the audit: a store that stopped answering fails
the scenario with an error instead of hanging it."""


@dataclass
class RegionalLive:
    settings: dict[str, Settings]
    bidders: dict[str, RunningBidder]
    recorders: dict[str, NoticeRecorder]
    replicators: list[Replicator]
    clients: dict[str, Any] = field(default_factory=dict)

    def partition(self) -> None:
        for replicator in self.replicators:
            replicator.partition()

    def heal(self) -> None:
        for replicator in self.replicators:
            replicator.heal()

    @property
    def lag_s(self) -> float:
        return max((r.lag_s for r in self.replicators), default=0.0)


def region_settings(
    stack: LocalStack,
    regions: LocalRegions,
    workdir: Path,
    home_reads: bool = False,
    **changes: Any,
) -> dict[str, Settings]:
    """Each region's settings: its own store among all, its own spool and ports; the
    first region runs the reconciler. ``changes`` apply to every region."""
    tag = uuid.uuid4().hex[:10]
    stores = tuple(regions.urls.items())
    names = {n: f"regions-{n.replace('_', '-')}-{tag}" for n in RESOURCES}
    out = {}
    for n, name in enumerate(regions.names):
        (workdir / name).mkdir(parents=True, exist_ok=True)
        out[name] = chaos_settings(
            stack, workdir / name, region=RegionConfig(name, stores, home_reads), reconciler=n == 0,
            notice_keys=(NOTICE_KEY,), **names, **changes,
        )  # fmt: skip
    return out


@contextlib.asynccontextmanager
async def regional_bidders(
    stack: LocalStack,
    regions: LocalRegions,
    workdir: Path,
    link: Link,
    home_reads: bool = False,
    **changes: Any,
) -> AsyncIterator[RegionalLive]:
    """One bidder per region (``region_settings``) and the replicators between their
    stores, running until the block ends."""
    settings = region_settings(stack, regions, workdir, home_reads, **changes)
    recorders = {name: NoticeRecorder() for name in settings}
    for name, recorder in recorders.items():
        recorder.target = f"http://{settings[name].host}:{settings[name].port}"
        settings[name] = settings[name].replace(public_url=recorder.public_url).validate()
    clients = {name: connect(url, socket_timeout_s=2.0) for name, url in regions.urls.items()}
    replicators = mesh(clients, link, seed=1)
    tasks = [asyncio.create_task(r.run()) for r in replicators]
    try:
        async with contextlib.AsyncExitStack() as started:
            bidders = {}
            for name in settings:
                await started.enter_async_context(recorders[name])
                bidders[name] = await started.enter_async_context(running_bidder(settings[name]))
            first = next(iter(settings.values()))
            await asyncio.sleep(LEASE_WAIT_TICKS * first.pacing_tick_s)
            yield RegionalLive(settings, bidders, recorders, replicators, clients)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in clients.values():
            await client.aclose()


async def replay_spread(
    live: RegionalLive, parts: Mapping[str, Sequence[StreamRecord]], **options: Any
) -> dict[str, ReplayResult]:
    """Each region's part replayed against its bidder, all at once, at the recorded pace."""
    deadline_ms = next(iter(live.settings.values())).deadline_ms
    opts = ReplayOptions(deadline_ms=deadline_ms, **options)

    async def one(name: str) -> ReplayResult:
        return await replay(list(parts[name]), f"{live.bidders[name].bid_url}/openrtb2/bid", opts)

    names = [name for name in live.bidders if parts.get(name)]
    results = await asyncio.gather(*(one(name) for name in names))
    return dict(zip(names, results, strict=True))


async def catch_up(live: RegionalLive, timeout_s: float = 30.0) -> float:
    """Wait until every replicator has applied everything logged so far; the seconds it
    took. TimeoutError past ``timeout_s``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    clients = live.clients
    async with asyncio.timeout(timeout_s):
        while True:
            ends = {name: await _last_id(client) for name, client in clients.items()}
            if all(_at_or_past(r.cursor, ends[r.name.split("->")[0]]) for r in live.replicators):
                return loop.time() - started
            await asyncio.sleep(0.05)


@dataclass(frozen=True)
class RegionsAudit:
    billed: int
    over_delivery: RegionalOverDelivery
    billed_by_region: dict[str, int]
    users_checked: int
    users_not_converged: dict[str, dict[str, int]]
    """User -> {"billed": expected count, region: merged count there} where they differ."""
    duplicate_ledger_entries: int

    def figures(self) -> dict[str, Any]:
        od = self.over_delivery
        return {
            "billed": self.billed,
            "billed_by_region": self.billed_by_region,
            "over_cap": od.overall.over_cap,
            "over_cap_not_in_flight": od.overall.not_in_flight,
            "over_cap_beyond_delay": len({f.bid_id for f in od.beyond_delay}),
            "max_excess": od.max_excess,
            "peak_within_delay": od.peak_within_delay,
            "reached_limit": od.overall.reached_limit,
            "users_checked": self.users_checked,
            "users_not_converged": len(self.users_not_converged),
            "duplicate_ledger_entries": self.duplicate_ledger_entries,
        }


async def audit_regions(
    live: RegionalLive, stack: LocalStack, regions: LocalRegions, campaigns: Path, delay_ms: int
) -> RegionsAudit:
    """The ledger (Kinesis), the delivered impressions by region (their recorders), the
    over-delivery audit, and every region's merged counts against the billed ones."""
    first = next(iter(live.settings.values()))
    kinesis = aws_client("kinesis", stack.aws_endpoint, first.aws_region)
    ledger = await asyncio.to_thread(read_ledger, kinesis, first.spend_stream)
    entries = distinct(ledger)
    billed = {int(e.bid_id) for e in entries}
    signer = TokenSigner({NOTICE_KEY[0]: NOTICE_KEY[1].encode()}, NOTICE_KEY[0])
    region_of: dict[int, str] = {}
    claims = {}
    counted_ms: dict[int, int] = {}
    for name, recorder in live.recorders.items():
        for c in claims_from_notice_urls(recorder.tokens(), signer):
            region_of[c.bid_id], claims[c.bid_id] = name, c
        counted_ms |= counted_times(recorder.answers, signer)
    delivered = [claims[b] for b in billed if b in claims]
    subjects = build_subjects(load_campaign_file(campaigns))
    audit = regional_over_delivery(
        delivered, subjects, counted_ms, region_of, delay_ms, deadline_ms=first.deadline_ms
    )
    tokens = counted_tokens(subjects.values())
    expected = expected_counts(delivered, subjects, tokens)
    differ = await asyncio.to_thread(_not_converged, regions, expected, tokens)
    by_region = {
        name: sum(region_of[c.bid_id] == name for c in delivered) for name in live.recorders
    }
    return RegionsAudit(
        len(delivered), audit, by_region, len(expected), differ, len(ledger) - len(entries)
    )


def _not_converged(
    regions: LocalRegions, expected: Mapping[str, int], tokens: frozenset[str]
) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name, url in regions.urls.items():
        with connect_sync(url, timeout_s=AUDIT_TIMEOUT_S) as client:
            for user, count in expected.items():
                raw = client.hgetall(keys.counters(keys.USER, user))
                merged = merged_count({k.decode(): int(v) for k, v in raw.items()}, tokens)
                if merged != count:
                    out.setdefault(user, {"billed": count})[name] = merged
    return out


async def _last_id(client: Any) -> str:
    found = await client.xrevrange(keys.CHANGE_LOG, count=1)
    return found[0][0].decode() if found else "0-0"


def _at_or_past(cursor: str, end: str) -> bool:
    def parts(entry_id: str) -> tuple[int, int]:
        ms, _, seq = entry_id.partition("-")
        return int(ms), int(seq or 0)

    return parts(cursor) >= parts(end)
