"""bidder.pipeline.auction_claims: the claim on real Valkey (one server, through an auto-pipelined
connection as a worker does, and a Cluster, through redis-py), the stage and the early
claim."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis
from redis.asyncio import RedisCluster
from redis.crc import key_slot

from bidder.adapters.valkey import AsyncValkey, connect_async, connect_pipelined
from bidder.adapters.valkey_pipelined import PipelinedConnection, pack
from bidder.core.clock import Clock, ManualClock, SystemClock
from bidder.core.nobid import NoBid
from bidder.openrtb.request import parse_bid_request
from bidder.pipeline.auction_claims import (
    CLAIM_BUDGET_S,
    AuctionClaims,
    EarlyClaimStage,
    SupplyDedupStage,
    auction_key,
)
from bidder.pipeline.runner import Context, EarlyClaim, PricedCandidate
from bidder.stack.child import free_port, held_port
from bidder.stack.cluster import LocalValkeyCluster, ValkeyNode
from bidder.supply.ads_txt import AdsRecord, AdsTxt
from bidder.supply.files import DirectorySource, SupplyCache
from bidder.supply.path import PathPolicy
from bidder.supply.schain import SupplyFiles
from tests.published import sample
from tests.valkey_replies import caught_up

WINDOW_MS = 1000
HOLD_S = 0.003
DIRECT_NODE = {"asi": "a.example", "sid": "p", "hp": 1}
DIRECT = {"ver": "1.0", "complete": 1, "nodes": [DIRECT_NODE]}
RESOLD = {"ver": "1.0", "complete": 1, "nodes": [DIRECT_NODE, {"asi": "b.example", "sid": "r"}]}


def new_tid() -> str:
    return str(uuid.uuid4())


def claims_count(outcome: str) -> float:
    return sample("bidsim_dedup_claims_total", {"outcome": outcome})


def context(
    ssp: str,
    tid: str | None,
    schain: dict[str, Any] | None = DIRECT,
    domain: str | None = None,
    received: float | None = None,
) -> Context:
    """A copy received at ``received`` (by default now, on the loop's clock)."""
    source: dict[str, Any] = {"schain": schain} if schain else {}
    if tid is not None:
        source["tid"] = tid
    doc: dict[str, Any] = {
        "id": "r",
        "imp": [{"id": "1", "banner": {"w": 300, "h": 250}}],
        "source": source,
    }
    if domain is not None:
        doc["site"] = {"domain": domain}
    if received is None:
        received = asyncio.get_running_loop().time()
    return Context(request=parse_bid_request(json.dumps(doc).encode()), ssp=ssp, received=received)


@pytest_asyncio.fixture
async def client(valkey_url: str) -> AsyncIterator[AsyncValkey]:
    valkey = connect_async(valkey_url, timeout_s=1.0)
    yield valkey
    await valkey.aclose()


@pytest_asyncio.fixture
async def pipelined(valkey_url: str) -> AsyncIterator[PipelinedConnection]:
    connection = await connected(valkey_url)
    yield connection
    await connection.aclose()


@pytest.fixture
def dedup(pipelined: PipelinedConnection, namespace: str) -> SupplyDedupStage:
    """Stage 8b on one server, on the loop's clock, recording its holds nowhere."""
    return stage(AuctionClaims(pipelined, namespace, WINDOW_MS), Sleeps(), loop_clock())


async def connected(url: str) -> PipelinedConnection:
    connection = connect_pipelined(url, connect_timeout_s=2.0)
    await connection.connect()
    return connection


def far() -> float:
    """A claim's limit no test reaches."""
    return asyncio.get_running_loop().time() + 5.0


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


class Sleeps:
    """The stage's sleep: records each hold, and waits on ``gate`` when one is set."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.held: list[float] = []
        self.holding = asyncio.Event()
        self.gate = gate

    async def __call__(self, seconds: float) -> None:
        self.held.append(seconds)
        self.holding.set()
        if self.gate is not None:
            await self.gate.wait()


async def decide(dedup: SupplyDedupStage, ctx: Context, deadline: float) -> NoBid | None:
    """Run the stage as the pipeline does: await it only when it returns an awaitable."""
    result = dedup(ctx, deadline)
    return await result if inspect.isawaitable(result) else result


async def claim_counted(
    valkey: PipelinedConnection | AsyncValkey, namespace: str
) -> tuple[NoBid | None, float]:
    """The stage's answer to one copy claimed through ``valkey``, and how many claims
    that counted as Valkey unavailable."""
    before = claims_count("unavailable")
    dedup = stage(AuctionClaims(valkey, namespace, WINDOW_MS), Sleeps(), loop_clock())
    deadline = asyncio.get_running_loop().time() + 1
    outcome = await decide(dedup, context("ssp-a", new_tid()), deadline)
    return outcome, claims_count("unavailable") - before


def stage(
    claims: AuctionClaims,
    sleeps: Sleeps,
    clock: Clock,
    policy: PathPolicy | None = None,
    claim_budget_s: float = CLAIM_BUDGET_S,
    supply: SupplyCache | None = None,
) -> SupplyDedupStage:
    return SupplyDedupStage(
        claims,
        policy or PathPolicy(),
        supply or SupplyCache(DirectorySource(Path("no-supply-files"))),
        clock,
        HOLD_S,
        claim_budget_s,
        sleep=sleeps,
    )


def still_clock() -> ManualClock:
    """A clock standing at the loop's now: a copy received "now" on it has held for no
    time at all when the stage looks, however slowly this machine gets there."""
    return ManualClock(start_monotonic=asyncio.get_running_loop().time())


def loop_clock() -> SystemClock:
    """The system clock: its monotonic time is the loop's, so deadlines mean the same to
    the stage and to ``asyncio.timeout_at``."""
    return SystemClock()


# -- the claim on one server --------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_first_claim_wins_and_a_second_is_refused(
    pipelined: PipelinedConnection, namespace: str
) -> None:
    claims, tid = AuctionClaims(pipelined, namespace, WINDOW_MS), new_tid()
    assert await claims.claim(tid, "ssp-a", far())
    assert not await claims.claim(tid, "ssp-b", far())


@pytest.mark.asyncio
async def test_claims_of_different_auctions_are_independent(
    pipelined: PipelinedConnection, namespace: str
) -> None:
    claims = AuctionClaims(pipelined, namespace, WINDOW_MS)
    assert await claims.claim(new_tid(), "ssp-a", far())
    assert await claims.claim(new_tid(), "ssp-a", far())


@pytest.mark.asyncio
async def test_a_claim_lives_for_the_window_and_names_its_ssp(
    pipelined: PipelinedConnection, client: AsyncValkey, namespace: str
) -> None:
    claims, tid = AuctionClaims(pipelined, namespace, WINDOW_MS), new_tid()
    await claims.claim(tid, "ssp-a", far())
    key = auction_key(namespace, tid)
    assert 0 < await client.pttl(key) <= WINDOW_MS
    assert await client.get(key) == b"ssp-a"


@pytest.mark.asyncio
async def test_of_many_concurrent_claims_from_separate_connections_one_wins(
    valkey_url: str, namespace: str
) -> None:
    connections = [await connected(valkey_url) for _ in range(8)]  # as 8 workers
    tid = new_tid()
    try:
        outcomes = await asyncio.gather(
            *(
                AuctionClaims(c, namespace, WINDOW_MS).claim(tid, f"ssp-{n}", far())
                for n, c in enumerate(connections)
            )
        )
    finally:
        await asyncio.gather(*(c.aclose() for c in connections))
    assert sorted(outcomes) == [False] * 7 + [True]


def test_the_key_hashes_on_the_auction_alone() -> None:
    tid = new_tid()
    assert key_slot(auction_key("bidsim", tid).encode()) == key_slot(tid.encode())
    assert auction_key("bidsim", tid) == f"bidsim:auction:{{{tid}}}"


@pytest.mark.asyncio
async def test_a_window_must_be_positive(pipelined: PipelinedConnection) -> None:
    with pytest.raises(ValueError, match="window"):
        AuctionClaims(pipelined, "bidsim", 0)


# -- the claim on a Valkey Cluster ----------------------------------------------------------


@pytest.mark.asyncio
async def test_claims_work_on_a_valkey_cluster(cluster: LocalValkeyCluster, namespace: str) -> None:
    valkey = connect_async(cluster.url, cluster=True, timeout_s=2.0)
    tids = [new_tid() for _ in range(30)]  # spread over every master's slots
    try:
        claims = AuctionClaims(valkey, namespace, WINDOW_MS)
        first = [await claims.claim(tid, "ssp-a", far()) for tid in tids]
        second = [await claims.claim(tid, "ssp-b", far()) for tid in tids]
    finally:
        await valkey.aclose()
    assert all(first) and not any(second)
    owners = {cluster.master_of(auction_key(namespace, tid)).port for tid in tids}
    assert len(owners) == 3


@pytest.mark.asyncio
async def test_a_cluster_slot_without_a_node_fails_open_and_is_counted(
    cluster: LocalValkeyCluster, namespace: str
) -> None:
    # SlotNotCoveredError, what a Cluster client raises when its slot map has no node
    # for the key's slot, is no RedisError: the stage must count it unavailable too.
    valkey = connect_async(cluster.url, cluster=True, timeout_s=2.0)
    try:
        await valkey.ping()  # the slot map is loaded
        assert isinstance(valkey, RedisCluster)
        slots = valkey.nodes_manager.slots_cache
        for slot in slots:
            slots[slot] = []
        outcome, unavailable = await claim_counted(valkey, namespace)
    finally:
        await valkey.aclose()
    assert (outcome, unavailable) == (None, 1)


# -- the stage ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_request_without_a_tid_bids_without_a_round_trip(dedup: SupplyDedupStage) -> None:
    before = claims_count("no_tid")
    assert dedup(context("ssp-a", None), asyncio.get_running_loop().time() + 1) is None
    assert claims_count("no_tid") == before + 1


@pytest.mark.asyncio
async def test_the_first_bidding_copy_bids_and_a_later_one_is_a_duplicate(
    dedup: SupplyDedupStage,
) -> None:
    won, duplicate = claims_count("won"), claims_count("duplicate")
    tid, deadline = new_tid(), asyncio.get_running_loop().time() + 1
    assert await decide(dedup, context("ssp-a", tid), deadline) is None
    assert await decide(dedup, context("ssp-b", tid), deadline) is NoBid.DUPLICATE_AUCTION
    assert (claims_count("won"), claims_count("duplicate")) == (won + 1, duplicate + 1)


@pytest.mark.parametrize(
    ("ssp", "schain", "preference", "held"),
    [
        ("ssp-a", DIRECT, (), []),
        ("ssp-a", RESOLD, (), [HOLD_S]),
        ("ssp-a", None, (), [HOLD_S]),
        ("ssp-b", RESOLD, ("ssp-b",), []),
        ("ssp-a", DIRECT, ("ssp-b",), [HOLD_S]),
    ],
    ids=["direct", "resold", "no chain", "preferred", "direct but not preferred"],
)
@pytest.mark.asyncio
async def test_only_a_copy_that_is_not_top_ranked_holds_before_claiming(
    pipelined: PipelinedConnection,
    namespace: str,
    ssp: str,
    schain: dict[str, Any] | None,
    preference: tuple[str, ...],
    held: list[float],
) -> None:
    sleeps = Sleeps()
    claims = AuctionClaims(pipelined, namespace, WINDOW_MS)
    clock = still_clock()
    dedup = stage(claims, sleeps, clock, PathPolicy(preference))
    ctx = context(ssp, new_tid(), schain, received=clock.monotonic())
    await decide(dedup, ctx, clock.monotonic() + 1)
    assert sleeps.held == held


@pytest.mark.parametrize(
    ("records", "held"),
    [
        ((("b.example", "RESELLER"),), []),
        ((("b.example", "RESELLER"), ("c.example", "DIRECT")), [HOLD_S]),
    ],
    ids=["no better path can exist", "another ssp sells direct"],
)
@pytest.mark.asyncio
async def test_a_copy_holds_only_when_a_better_path_can_exist(
    client: AsyncValkey,
    namespace: str,
    records: tuple[tuple[str, str], ...],
    held: list[float],
) -> None:
    """Through ssp-b on a two-hop chain: with ssp-b and ssp-c the only other SSPs."""
    sleeps, supply = Sleeps(), SupplyCache(DirectorySource(Path("no-supply-files")))
    ads = AdsTxt(tuple(AdsRecord(d, "acct", rel) for d, rel in records))
    supply.files = SupplyFiles(sellers={}, ads_txt={"pub.example": ads}, app_ads_txt={})
    policy = PathPolicy(domains={"ssp-b": "b.example", "ssp-c": "c.example"})
    clock = still_clock()
    dedup = stage(AuctionClaims(client, namespace, WINDOW_MS), sleeps, clock, policy, supply=supply)
    ctx = context("ssp-b", new_tid(), RESOLD, domain="pub.example", received=clock.monotonic())
    assert await decide(dedup, ctx, clock.monotonic() + 1) is None
    assert (sleeps.held, ctx.held) == (held, bool(held))


@pytest.mark.asyncio
async def test_a_late_copy_holds_only_half_the_time_left(
    pipelined: PipelinedConnection, namespace: str
) -> None:
    # A clock that stands still at the loop's now: the time left is exactly 3.5 ms when
    # the stage looks, however slowly this machine gets there.
    sleeps, clock = Sleeps(), still_clock()
    dedup = stage(AuctionClaims(pipelined, namespace, WINDOW_MS), sleeps, clock)
    ctx = context("ssp-a", new_tid(), None, received=clock.monotonic())
    await decide(dedup, ctx, clock.monotonic() + 0.0035)
    # (3.5 ms left - 1.5 ms hold margin) / 2 = 1 ms, under the 3 ms hold.
    assert sleeps.held == [pytest.approx(0.001, abs=1e-9)]


@pytest.mark.parametrize(
    ("age_s", "held"),
    [(0.001, [pytest.approx(HOLD_S - 0.001, abs=1e-9)]), (HOLD_S + 0.0005, []), (0.010, [])],
    ids=["received 1 ms ago: holds the rest", "received just over a hold ago", "long ago"],
)
@pytest.mark.asyncio
async def test_the_hold_runs_from_the_copys_receipt(
    pipelined: PipelinedConnection, namespace: str, age_s: float, held: list[float]
) -> None:
    """A better copy that reached us within the hold of this one's receipt claims
    first; the time this copy took to reach the claim counts towards its hold."""
    sleeps, clock = Sleeps(), still_clock()
    dedup = stage(AuctionClaims(pipelined, namespace, WINDOW_MS), sleeps, clock)
    ctx = context("ssp-a", new_tid(), RESOLD, received=clock.monotonic() - age_s)
    assert await decide(dedup, ctx, clock.monotonic() + 1) is None
    assert (sleeps.held, ctx.held) == (held, bool(held))


@pytest.mark.asyncio
async def test_a_better_copy_arriving_during_a_hold_gets_the_bid(
    pipelined: PipelinedConnection, namespace: str
) -> None:
    sleeps, clock = Sleeps(gate=asyncio.Event()), still_clock()
    dedup = stage(AuctionClaims(pipelined, namespace, WINDOW_MS), sleeps, clock)
    tid, deadline = new_tid(), clock.monotonic() + 1
    first = context("ssp-a", tid, RESOLD, received=clock.monotonic())
    resold = asyncio.ensure_future(decide(dedup, first, deadline))
    await sleeps.holding.wait()  # the resold copy came first and is holding
    direct = await decide(dedup, context("ssp-b", tid, DIRECT), deadline)
    assert sleeps.gate is not None
    sleeps.gate.set()
    assert (direct, await resold) == (None, NoBid.DUPLICATE_AUCTION)


@pytest.mark.asyncio
async def test_valkey_down_fails_open_and_is_counted(namespace: str) -> None:
    nobody = connect_pipelined(f"redis://127.0.0.1:{held_port()}", connect_timeout_s=0.5)
    try:
        outcome, unavailable = await claim_counted(nobody, namespace)
    finally:
        await nobody.aclose()
    assert (outcome, unavailable) == (None, 1)


@pytest.fixture
def private_valkey(tmp_path: Path) -> Iterator[ValkeyNode]:
    node = ValkeyNode(tmp_path, free_port())
    node.start()
    try:
        yield node
    finally:
        os.killpg(node.pid, signal.SIGCONT)
        node.stop()


async def claim_while_stalled(
    node: ValkeyNode, namespace: str, left_s: float, way: str
) -> NoBid | None:
    """A claim on ``node`` once it stopped answering (SIGSTOP), ``left_s`` before the
    deadline, through the auto-pipelined connection (``way`` "pipelined") or redis-py
    (a Cluster's way, on one node); the stage's limits, not a socket timeout, must
    cut it."""
    valkey: PipelinedConnection | AsyncValkey
    if way == "pipelined":
        valkey = await connected(node.url)
    else:
        valkey = connect_async(node.url, timeout_s=5.0)
        await valkey.ping()  # connected before the stall
    try:
        os.killpg(node.pid, signal.SIGSTOP)
        clock = loop_clock()
        claims = AuctionClaims(valkey, namespace, WINDOW_MS)
        dedup = stage(claims, Sleeps(), clock)
        return await decide(dedup, context("ssp-a", new_tid()), clock.monotonic() + left_s)
    finally:
        await valkey.aclose()


WAYS = pytest.mark.parametrize("way", ["pipelined", "redis-py"])


@pytest.mark.chaos
@pytest.mark.asyncio
@WAYS
async def test_a_stalled_valkey_fails_open_by_the_deadline(
    private_valkey: ValkeyNode, namespace: str, way: str
) -> None:
    before = claims_count("unavailable")
    assert await claim_while_stalled(private_valkey, namespace, 0.05, way) is None
    assert claims_count("unavailable") == before + 1


@pytest.mark.chaos
@pytest.mark.asyncio
@WAYS
async def test_a_claim_started_too_close_to_the_deadline_is_late_not_failed_open(
    private_valkey: ValkeyNode, namespace: str, way: str
) -> None:
    before = claims_count("late")
    outcome = await claim_while_stalled(private_valkey, namespace, CLAIM_BUDGET_S, way)
    assert outcome is NoBid.DEADLINE
    assert claims_count("late") == before + 1


@pytest.mark.chaos
@pytest.mark.asyncio
async def test_a_claim_that_timed_out_lands_and_keeps_its_connection(
    private_valkey: ValkeyNode, namespace: str
) -> None:
    valkey = await connected(private_valkey.url)
    tid, clock = new_tid(), loop_clock()
    dedup = stage(AuctionClaims(valkey, namespace, WINDOW_MS), Sleeps(), clock)
    try:
        with redis.Redis.from_url(private_valkey.url) as admin:
            before = admin.info("stats")["total_connections_received"]
            os.killpg(private_valkey.pid, signal.SIGSTOP)
            try:
                late = await decide(dedup, context("ssp-a", tid), clock.monotonic() + 0.05)
            finally:
                os.killpg(private_valkey.pid, signal.SIGCONT)
            await caught_up(valkey)
            # Answered after the late claim's reply, which lands and goes to nobody.
            again = await decide(dedup, context("ssp-b", tid), clock.monotonic() + 0.05)
            assert (late, again, valkey.dropped) == (None, NoBid.DUPLICATE_AUCTION, 1)
            assert admin.info("stats")["total_connections_received"] == before
    finally:
        await valkey.aclose()


# -- the early claim (stage 7a) --------------------------------------------------------------


def given_back() -> float:
    return sample("bidsim_dedup_claims_given_back_total")


async def key_exists(valkey: PipelinedConnection, key: str) -> bool:
    """Whether ``key`` exists after every command sent before on ``valkey`` (a
    give-back's ``DEL`` among them): one connection's commands run in order."""
    return bool(await valkey.send(pack(b"EXISTS", key)))


@pytest.mark.asyncio
async def test_a_top_ranked_copy_claims_before_the_cap_check_and_8b_reads_the_reply(
    pipelined: PipelinedConnection, dedup: SupplyDedupStage, namespace: str
) -> None:
    won = claims_count("won")
    early, ctx = EarlyClaimStage(dedup), context("ssp-a", new_tid())
    deadline = asyncio.get_running_loop().time() + 1
    assert early(ctx, deadline) is None
    assert ctx.claim is not None
    await ctx.claim.reply  # in Valkey before stage 8b runs
    holder = await pipelined.send(pack(b"GET", auction_key(namespace, ctx.request.tid or "")))
    assert holder == b"ssp-a"
    assert await decide(dedup, ctx, deadline) is None
    assert claims_count("won") == won + 1


@pytest.mark.asyncio
async def test_an_early_claim_lost_to_another_copy_is_a_duplicate(dedup: SupplyDedupStage) -> None:
    early, tid = EarlyClaimStage(dedup), new_tid()
    deadline = asyncio.get_running_loop().time() + 1
    first, second = context("ssp-a", tid), context("ssp-b", tid)
    early(first, deadline)
    early(second, deadline)
    assert await decide(dedup, first, deadline) is None
    assert await decide(dedup, second, deadline) is NoBid.DUPLICATE_AUCTION


@pytest.mark.asyncio
async def test_8b_answers_at_once_when_the_early_claims_reply_is_in(
    dedup: SupplyDedupStage,
) -> None:
    early, tid = EarlyClaimStage(dedup), new_tid()
    deadline = asyncio.get_running_loop().time() + 1
    first, second = context("ssp-a", tid), context("ssp-b", tid)
    early(first, deadline)
    early(second, deadline)
    assert first.claim is not None and second.claim is not None
    await asyncio.gather(first.claim.reply, second.claim.reply)
    assert dedup(first, deadline) is None  # an answer, not an awaitable
    assert dedup(second, deadline) is NoBid.DUPLICATE_AUCTION


@pytest.mark.parametrize(
    ("failure", "fair_chance", "answer", "outcome"),
    [
        (ConnectionResetError("reset"), True, None, "unavailable"),
        (TimeoutError(), True, None, "unavailable"),
        (TimeoutError(), False, NoBid.DEADLINE, "late"),
    ],
    ids=["Valkey failed: bids", "no answer in fair time: bids", "no answer, started late"],
)
@pytest.mark.asyncio
async def test_an_early_claim_that_failed_is_judged_at_once(
    dedup: SupplyDedupStage,
    failure: BaseException,
    fair_chance: bool,
    answer: NoBid | None,
    outcome: str,
) -> None:
    ctx = context("ssp-a", new_tid())
    reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    reply.set_exception(failure)
    ctx.claim = EarlyClaim(reply, 0.0, fair_chance)
    counted = claims_count(outcome)
    assert dedup(ctx, asyncio.get_running_loop().time() + 1) is answer
    assert claims_count(outcome) == counted + 1


@pytest.mark.parametrize("bid", [False, True], ids=["no bid: given back", "bid: kept"])
@pytest.mark.asyncio
async def test_a_copy_that_claimed_early_and_did_not_bid_gives_the_claim_back(
    pipelined: PipelinedConnection, dedup: SupplyDedupStage, namespace: str, bid: bool
) -> None:
    """Claimed early, then capped or under the floor: a worse copy may still bid."""
    before = given_back()
    early, tid = EarlyClaimStage(dedup), new_tid()
    ctx = context("ssp-a", tid)
    early(ctx, asyncio.get_running_loop().time() + 1)
    assert ctx.claim is not None
    await ctx.claim.reply
    bids = [PricedCandidate(candidate=None, price_cpm_micros=1)] if bid else []  # type: ignore[arg-type]
    ctx.finish(bids)
    assert await key_exists(pipelined, auction_key(namespace, tid)) is bid
    assert given_back() == before + (not bid)
    if not bid:  # the worse copy that came after it now bids
        worse = context("ssp-b", tid, RESOLD)
        assert await decide(dedup, worse, asyncio.get_running_loop().time() + 1) is None


@pytest.mark.asyncio
async def test_a_copy_whose_early_claim_lost_gives_nothing_back(
    pipelined: PipelinedConnection, namespace: str
) -> None:
    before = given_back()
    claims = AuctionClaims(pipelined, namespace, WINDOW_MS)
    dedup = stage(claims, Sleeps(), loop_clock())
    tid = new_tid()
    assert await claims.claim(tid, "ssp-b", far())
    ctx = context("ssp-a", tid)
    EarlyClaimStage(dedup)(ctx, asyncio.get_running_loop().time() + 1)
    assert ctx.claim is not None
    ctx.finish([])  # before the reply: given back once it came, if it had won
    await ctx.claim.reply
    assert await key_exists(pipelined, auction_key(namespace, tid))
    assert given_back() == before


@pytest.mark.parametrize(
    ("ssp", "schain", "way"),
    [("ssp-a", RESOLD, "pipelined"), ("ssp-a", None, "pipelined"), ("ssp-a", DIRECT, "redis-py")],
    ids=["resold: holds at 8b", "no chain: holds at 8b", "redis-py (a Cluster's way)"],
)
@pytest.mark.asyncio
async def test_no_early_claim_for_a_copy_that_holds_or_without_the_pipelined_connection(
    pipelined: PipelinedConnection,
    client: AsyncValkey,
    namespace: str,
    ssp: str,
    schain: dict[str, Any] | None,
    way: str,
) -> None:
    valkey: PipelinedConnection | AsyncValkey = pipelined if way == "pipelined" else client
    sleeps, clock = Sleeps(), still_clock()
    dedup = stage(AuctionClaims(valkey, namespace, WINDOW_MS), sleeps, clock)
    ctx, deadline = (
        context(ssp, new_tid(), schain, received=clock.monotonic()),
        clock.monotonic() + 1,
    )
    EarlyClaimStage(dedup)(ctx, deadline)
    assert ctx.claim is None
    assert await decide(dedup, ctx, deadline) is None
    assert sleeps.held == ([] if schain is DIRECT else [HOLD_S])


@pytest.mark.asyncio
async def test_a_request_without_a_tid_claims_nothing_early(
    pipelined: PipelinedConnection, dedup: SupplyDedupStage
) -> None:
    ctx = context("ssp-a", None)
    commands = pipelined.commands
    EarlyClaimStage(dedup)(ctx, asyncio.get_running_loop().time() + 1)
    assert (ctx.claim, ctx.finishers, pipelined.commands) == (None, [], commands)


@pytest.mark.asyncio
async def test_a_claim_older_than_half_the_window_is_left_to_expire(
    pipelined: PipelinedConnection, namespace: str
) -> None:
    """By then the key may have expired and been claimed by another copy."""
    before = given_back()
    clock = ManualClock(start_monotonic=asyncio.get_running_loop().time())
    dedup = stage(AuctionClaims(pipelined, namespace, WINDOW_MS), Sleeps(), clock)
    tid = new_tid()
    ctx = context("ssp-a", tid)
    EarlyClaimStage(dedup)(ctx, clock.monotonic() + 1)
    assert ctx.claim is not None
    await ctx.claim.reply
    clock.advance(WINDOW_MS / 1000 / 2)
    ctx.finish([])
    assert await key_exists(pipelined, auction_key(namespace, tid))
    assert given_back() == before
