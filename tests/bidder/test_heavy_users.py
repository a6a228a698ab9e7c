"""Heavy users through the whole stack: capped no-bids, and no impression above a cap.

A stream where ten users send about 30% of the requests is replayed open-loop against
``running_bidder`` (two worker processes, the reconciler, a private Valkey + moto),
the replay's exchange model sending win and billing notices. The notices reach the
bidder through a recording proxy (the bidder's ``public_url``) that keeps every signed
token: its claims name the user, household, campaign, creative and bid instant of the
impression. The ledger in Kinesis says which impressions were billed, and when.

The audit then judges every billed impression by brute force with the pure rules
(``fcap.rules.counts_at``): at its bid instant, how many earlier impressions of the
same counter (user or household, token) still counted? At ``limit`` or more the
impression is *above the cap*.

- reserve-at-bid campaigns (northwind): never above a cap, not once;
- count-on-win campaigns: an impression is counted when its notice bills it, so a bid
  made while an earlier impression of the same person was still in flight (bid, not
  yet counted) cannot see it. That is the documented bound (docs/fcap.md, live
  results): every impression above a cap must be explained by in-flight ones, i.e.
  the impressions already counted when it was bid were under the limit;
- viewable-counted campaigns (alpenrail, cobalt) cap *viewable* impressions, and the
  replay sends no viewability events, so their billed impressions are not audited.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp import web

from bidder.aws import aws_client
from bidder.campaigns import load_campaign_file
from bidder.ledger import LedgerEntry, decode_entry
from bidder.replay.generator import generate
from bidder.replay.replayer import ReplayOptions, ReplayResult, replay
from bidder.replay.stream import read_stream
from bidder.server import running_bidder
from bidder.settings import Settings
from bidder.stack import LocalStack, free_port
from bidder.tokens import NoticeClaims, TokenSigner
from fcap.rules import Rule, Subject, build_subjects, counts_at
from tests.bidder.live import CAMPAIGNS, stack_settings

KEY = "heavy-users-notice-key-" + "h" * 32
SIGNER = TokenSigner({"k1": KEY.encode()}, "k1")
IN_FLIGHT_MS = 50
"""An impression billed less than this before a later bid counts as still in flight:
the count lands after the ledger's fsync and a Valkey round trip, and the later bid's
check ran before its token was stamped (scoring in between); on a loaded 2-core box
that is tens of ms."""


@dataclass(frozen=True, slots=True)
class Impression:
    claims: NoticeClaims
    billed_ms: int

    @property
    def order(self) -> tuple[int, int]:
        return self.claims.issued_ms, self.claims.bid_id


@dataclass(frozen=True, slots=True)
class AboveCap:
    campaign_id: str
    token: str
    limit: int
    counting: int
    """Earlier impressions still counting at its bid instant (>= limit)."""
    counted: int
    """Of those, the ones billed (so counted) before it was bid."""


class NoticeProxy:
    """The exchange's side of the notice path: forwards each notice, keeps its token."""

    def __init__(self, port: int) -> None:
        self.port, self.target = port, ""
        self.tokens: list[str] = []
        self.statuses: Counter[int] = Counter()

    async def handle(self, request: web.Request) -> web.Response:
        self.tokens += parse_qs(request.query_string).get("t", [])
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.target + request.path_qs) as resp,
        ):
            self.statuses[resp.status] += 1
            return web.Response(status=resp.status, body=await resp.read())


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack() as private:  # fresh counters: nothing counted before this replay
        yield private


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("heavy") / "heavy.jsonl.gz"
    generate(path, 2000, seed=5, mean_rate=400, heavy_users=10, heavy_share=0.3)
    return path


def _settings(stack: LocalStack, proxy: NoticeProxy, tmp_path: Path) -> Settings:
    return stack_settings(
        stack,
        tmp_path,
        workers=2,
        # Decisions, not latency, are under test here: a stall of the shared 2-core box
        # must not turn cap checks into fail-open timeouts (counted and bounded anyway).
        deadline_ms=50.0,
        fcap_check_timeout_ms=25.0,
        public_url=f"http://127.0.0.1:{proxy.port}",
        notice_keys=(("k1", KEY),),
    )


def _ledger(settings: Settings, endpoint: str) -> list[LedgerEntry]:
    kinesis = aws_client("kinesis", endpoint, settings.aws_region)
    entries = []
    for shard in kinesis.list_shards(StreamName=settings.spend_stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=settings.spend_stream,
            ShardId=shard["ShardId"],
            ShardIteratorType="TRIM_HORIZON",
        )["ShardIterator"]
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=1000)
            entries += [decode_entry(r["Data"]) for r in page["Records"]]
            iterator = page.get("NextShardIterator") if page["Records"] else None
    return entries


def billed_impressions(tokens: list[str], ledger: list[LedgerEntry]) -> list[Impression]:
    claims = {c.bid_id: c for c in map(SIGNER.verify, tokens)}
    return sorted(
        (Impression(claims[int(e.bid_id)], e.ts_ms) for e in ledger), key=lambda i: i.order
    )


def _checked(subject: Subject, claims: NoticeClaims) -> Iterator[tuple[Rule, str]]:
    """(rule, counter key) of every cap the bid was checked against."""
    for rules, key in (
        (subject.user_rules, claims.user_key),
        (subject.household_rules, claims.household_key),
    ):
        if key is not None:
            yield from ((rule, key) for rule in rules)


def counters(
    impressions: list[Impression], subjects: dict[tuple[str, str], Subject]
) -> dict[tuple[str, str], list[Impression]]:
    """(token, user or household key) -> the impressions the live bidder counted in it."""
    out: dict[tuple[str, str], list[Impression]] = defaultdict(list)
    for imp in impressions:
        c = imp.claims
        subject = subjects[c.campaign_id, c.creative_id]
        if subject.count_event == "viewable":
            continue  # counted on viewability events, which the replay never sends
        if c.user_key is not None:
            for rule in subject.user_count_rules:  # advertiser windows fan out
                out[rule.token, c.user_key].append(imp)
        if c.household_key is not None:
            for rule in subject.household_rules:
                out[rule.token, c.household_key].append(imp)
    return out


def above_caps(
    impressions: list[Impression], subjects: dict[tuple[str, str], Subject]
) -> tuple[list[AboveCap], list[AboveCap]]:
    """Impressions above a cap: (of reserve-at-bid campaigns, of count-on-win ones)."""
    by_counter = counters(impressions, subjects)
    reserved: list[AboveCap] = []
    on_win: list[AboveCap] = []
    for imp in impressions:
        c = imp.claims
        subject = subjects[c.campaign_id, c.creative_id]
        if subject.count_event == "viewable":
            continue
        for rule, key in _checked(subject, c):
            earlier = [
                j
                for j in by_counter[rule.token, key]
                if j.order < imp.order and counts_at(rule, j.claims.issued_ms, c.issued_ms)
            ]
            if len(earlier) >= rule.limit:
                counted = sum(j.billed_ms + IN_FLIGHT_MS <= c.issued_ms for j in earlier)
                found = AboveCap(c.campaign_id, rule.token, rule.limit, len(earlier), counted)
                (reserved if subject.reserve else on_win).append(found)
    return reserved, on_win


@dataclass(frozen=True)
class Run:
    result: ReplayResult
    impressions: list[Impression]
    notices: Counter[int]
    check_errors: int
    """Cap checks that failed or timed out (``bidsim_fcap_store_errors_total{op="check"}``):
    each let its fail-open candidates bid unchecked and uncounted."""


async def _check_errors(admin_url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(f"{admin_url}/metrics") as resp:
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith('bidsim_fcap_store_errors_total{op="check"}'):
            return int(float(line.split()[1]))
    return 0


@pytest.fixture(scope="module")
def run(stack: LocalStack, stream: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("heavy-run")
    warmup = tmp / "warmup.jsonl.gz"
    generate(warmup, 400, seed=6, mean_rate=400)
    return asyncio.run(_run(stack, [warmup, stream], tmp))


async def _run(stack: LocalStack, streams: list[Path], tmp: Path) -> Run:
    """Replay the streams in turn (a short warm-up first: the workers' first cap checks
    open their Valkey connections, and those are the ones that time out), notices on."""
    notices = NoticeProxy(free_port())
    app = web.Application()
    app.router.add_get("/notice/{kind}", notices.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", notices.port).start()
    settings = _settings(stack, notices, tmp)
    notices.target = f"http://{settings.host}:{settings.port}"
    try:
        async with running_bidder(settings) as bidder:
            for path in streams:
                result = await replay(
                    list(read_stream(path)),
                    f"{bidder.bid_url}/openrtb2/bid",
                    ReplayOptions(deadline_ms=settings.deadline_ms),
                )
            errors = await _check_errors(bidder.admin_url)
    finally:
        await runner.cleanup()
    # The workers have stopped: their spools are flushed to Kinesis.
    ledger = await asyncio.to_thread(_ledger, settings, stack.aws_endpoint)
    impressions = billed_impressions(notices.tokens, ledger)
    return Run(result, impressions, notices.statuses, errors)


SUBJECTS = build_subjects(load_campaign_file(CAMPAIGNS))


def test_heavy_users_meet_their_caps(run: Run) -> None:
    assert run.result.nbr_reasons["capped"] > 0


def test_every_notice_was_accepted(run: Run) -> None:
    assert run.impressions and set(run.notices) <= {200, 204}


def test_reserve_at_bid_passes_a_cap_only_where_a_check_failed_open(run: Run) -> None:
    reserved, _ = above_caps(run.impressions, SUBJECTS)
    assert len(reserved) <= run.check_errors, _summary(run)


def test_count_on_win_passes_a_cap_only_by_bids_in_flight_or_failed_checks(run: Run) -> None:
    _, on_win = above_caps(run.impressions, SUBJECTS)
    unexplained = [a for a in on_win if a.counted >= a.limit]
    assert len(unexplained) <= run.check_errors, _summary(run)


def _summary(run: Run) -> dict[str, Any]:
    """The figures docs/fcap.md records, shown when an assertion fails."""
    reserved, on_win = above_caps(run.impressions, SUBJECTS)
    return {
        "requests": run.result.requests,
        "capped": run.result.nbr_reasons["capped"],
        "fcap_unavailable": run.result.nbr_reasons["fcap_unavailable"],
        "billed": len(run.impressions),
        "check_errors": run.check_errors,
        "above_cap_reserve": len(reserved),
        "above_cap_on_win": len(on_win),
        "above_cap_on_win_not_in_flight": sum(a.counted >= a.limit for a in on_win),
        "max_counting_over_limit": max((a.counting - a.limit + 1 for a in on_win), default=0),
    }
