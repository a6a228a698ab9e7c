"""Deferred notices: journaled (fsync'd) when billing can't be done now, billed exactly once
later. The journal on disk, the biller against the real Valkey (a dead port for "down")."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from bidder.adapters.aws import aws_client
from bidder.core.clock import ManualClock
from bidder.replay.ledger_audit import read_ledger
from bidder.serve.reconciler_process import running_reconciler
from bidder.serve.server import prepare_resources
from bidder.serve.settings import Settings
from bidder.stack.child import held_port
from bidder.stack.local import LocalStack
from bidder.winloop.billable import Billable, BillingOutcome, decode_billable
from bidder.winloop.billing import Biller, BillingUnavailable
from bidder.winloop.deferred import DeferredJournal
from bidder.winloop.notices import Notice
from ids.snowflake import Snowflake
from tests.bidder.live import LiveBidder
from tests.bidder.openrtb_checks import with_fresh_user
from tests.bidder.winloop.test_billing import CLAIMS, SIMPLE_BANNER, Ledger, Sink
from tests.bidder.winloop.test_spend_stream import KEY, SIGNER, Node, _wait_for_stream
from tests.published import sample

pytestmark = pytest.mark.long(12)

TTL_MS = 120_000


def billable(bid_id: int = 7, ledger_id: int | None = None) -> Billable:
    claims = dataclasses.replace(CLAIMS, bid_id=bid_id)
    return Billable(claims, "bill", 1_250_000, CLAIMS.issued_ms + 5, ledger_id)


def notice(bid_id: int = 7) -> Notice:
    return Notice(dataclasses.replace(CLAIMS, bid_id=bid_id), 1_250_000)


class Settler:
    """Settles what it is given, in order, or refuses (None) while ``down``."""

    def __init__(self) -> None:
        self.seen: list[Billable] = []
        self.down = False

    async def __call__(self, item: Billable) -> BillingOutcome | None:
        if self.down:
            return None
        self.seen.append(item)
        return BillingOutcome.BILLED


class Journals:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.clock = ManualClock()
        self.opened: list[DeferredJournal] = []

    async def open(self) -> DeferredJournal:
        journal = DeferredJournal(self.directory, self.clock)
        await journal.open()
        self.opened.append(journal)
        return journal

    def segments(self) -> list[Path]:
        return sorted(self.directory.glob("*.seg"))


@pytest_asyncio.fixture
async def journals(tmp_path: Path) -> AsyncIterator[Journals]:
    fixture = Journals(tmp_path / "deferred")
    yield fixture
    for journal in fixture.opened:
        await journal.close()


def crash(journal: DeferredJournal) -> None:
    """What kill -9 leaves: files as they are, locks released."""
    for seg in journal._segs:
        seg.segment.close()
    journal._segs.clear()


# ------------------------------------------------------------------------- the journal


@given(
    bid_id=st.integers(0, 2**63 - 1),
    price=st.integers(0, 10**15),
    ledger_id=st.none() | st.integers(0, 2**63 - 1),
    user=st.none() | st.text(max_size=40),
)
def test_a_billable_survives_encoding(
    bid_id: int, price: int, ledger_id: int | None, user: str | None
) -> None:
    claims = dataclasses.replace(CLAIMS, bid_id=bid_id, user_key=user)
    item = Billable(claims, "win", price, 1_767_225_600_123, ledger_id)
    assert decode_billable(item.encode()) == item


@pytest.mark.asyncio
async def test_journaled_notices_replay_in_order(journals: Journals) -> None:
    journal, settle = await journals.open(), Settler()
    for n in range(3):
        await journal.append(billable(n))
    assert (await journal.replay(settle), settle.seen) == (True, [billable(n) for n in range(3)])


@pytest.mark.asyncio
async def test_a_notice_that_cannot_be_settled_stays_journaled(journals: Journals) -> None:
    journal, settle = await journals.open(), Settler()
    await journal.append(billable())
    settle.down = True
    assert (await journal.replay(settle), journal.depth) == (False, 1)


@pytest.mark.asyncio
async def test_a_dead_processes_journal_is_adopted_and_replayed(journals: Journals) -> None:
    dead = await journals.open()
    for n in range(3):
        await dead.append(billable(n))
    crash(dead)
    heir, settle = await journals.open(), Settler()
    await heir.replay(settle)
    assert settle.seen == [billable(n) for n in range(3)]


@pytest.mark.asyncio
async def test_what_a_dead_process_replayed_is_not_replayed_again(journals: Journals) -> None:
    dead, settle = await journals.open(), Settler()
    await dead.append(billable(1))
    await dead.replay(settle)
    await dead.append(billable(2))
    crash(dead)
    heir = await journals.open()
    await heir.replay(settle)
    assert settle.seen == [billable(1), billable(2)]


@pytest.mark.asyncio
async def test_a_live_processes_journal_is_left_alone(journals: Journals) -> None:
    live = await journals.open()
    await live.append(billable())
    other = await journals.open()
    assert other.depth == 0


@pytest.mark.asyncio
async def test_a_settled_journal_leaves_no_records_on_disk(journals: Journals) -> None:
    journal = await journals.open()
    await journal.append(billable())
    await journal.replay(Settler())
    assert [path.stat().st_size for path in journals.segments()] == [0]


@pytest.mark.asyncio
async def test_a_journal_that_is_not_open_refuses_appends(tmp_path: Path) -> None:
    journal = DeferredJournal(tmp_path, ManualClock())
    with pytest.raises(Exception, match="not open"):
        await journal.append(billable())
    await journal.close()


# -------------------------------------------------- the biller: defer, then bill once


@dataclasses.dataclass
class Env:
    journal: DeferredJournal
    ledger: Ledger
    sink: Sink
    clock: ManualClock
    ids: Snowflake
    up: aioredis.Redis
    down: aioredis.Redis
    namespace: str

    def biller(self, valkey: aioredis.Redis, journal: DeferredJournal | None = None) -> Biller:
        return Biller(
            valkey, self.ledger, self.ids.next_id, self.clock, [self.sink],
            dedup_ttl_ms=TTL_MS, namespace=self.namespace, deferred=journal or self.journal,
        )  # fmt: skip

    async def replay(self) -> bool:
        return await self.journal.replay(self.biller(self.up).replay)

    def key(self, bid_id: int = 7) -> str:
        return f"{self.namespace}:billed:{bid_id}"


@pytest_asyncio.fixture
async def env(valkey_url: str, tmp_path: Path) -> AsyncIterator[Env]:
    clock = ManualClock()
    journal = DeferredJournal(tmp_path / "deferred", clock)
    await journal.open()
    up = aioredis.Redis.from_url(valkey_url)
    # A refused connection fails at once: redis-py's default retries back off for seconds.
    down = aioredis.Redis(port=held_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    ids = Snowflake(clock, worker=4, pause=lambda: clock.advance(0.001))
    namespace = f"defer-{uuid.uuid4().hex[:8]}"
    yield Env(journal, Ledger(), Sink(), clock, ids, up, down, namespace)
    await journal.close()
    await up.aclose()
    await down.aclose()


@pytest.mark.asyncio
async def test_a_notice_is_deferred_while_the_dedup_store_is_down(env: Env) -> None:
    outcome = await env.biller(env.down).bill(notice(), "bill")
    assert (outcome, env.journal.depth, env.ledger.entries, env.sink.seen) == (
        BillingOutcome.DEFERRED,
        1,
        [],
        [],
    )


@pytest.mark.asyncio
async def test_a_deferred_notice_is_billed_once_when_the_store_is_back(env: Env) -> None:
    await env.biller(env.down).bill(notice(), "bill")
    await env.replay()
    await env.replay()
    [entry] = env.ledger.entries
    assert (entry.bid_id, len(env.sink.seen), env.journal.depth) == ("7", 1, 0)


@pytest.mark.asyncio
async def test_a_replay_bills_with_the_ledger_id_and_time_of_the_first_attempt(env: Env) -> None:
    await env.biller(env.down).bill(notice(), "bill")
    [pending] = [entry.billable for entry in env.journal._queue]
    env.clock.advance(30)
    await env.replay()
    [entry] = env.ledger.entries
    assert (entry.ledger_id, entry.ts_ms) == (pending.ledger_id, pending.accepted_ms)


@pytest.mark.asyncio
async def test_a_replay_bills_when_the_first_attempts_set_reached_the_store(env: Env) -> None:
    # A paused Valkey applies the SET after the client gave up: the key holds our id.
    await env.biller(env.down).bill(notice(), "bill")
    [pending] = [entry.billable for entry in env.journal._queue]
    await env.up.set(env.key(), pending.ledger_id or 0)
    await env.replay()
    assert [e.ledger_id for e in env.ledger.entries] == [pending.ledger_id]


@pytest.mark.asyncio
async def test_a_duplicate_deferred_with_its_original_is_a_duplicate(env: Env) -> None:
    for kind in ("win", "bill"):
        await env.biller(env.down).bill(notice(), kind)
    before = _replayed(BillingOutcome.DUPLICATE)
    await env.replay()
    assert (len(env.ledger.entries), _replayed(BillingOutcome.DUPLICATE)) == (1, before + 1)


@pytest.mark.asyncio
async def test_a_notice_after_the_replay_is_a_duplicate(env: Env) -> None:
    await env.biller(env.down).bill(notice(), "bill")
    await env.replay()
    assert await env.biller(env.up).bill(notice(), "win") == BillingOutcome.DUPLICATE


@pytest.mark.asyncio
async def test_a_deferred_notice_already_billed_live_is_a_duplicate(env: Env) -> None:
    await env.biller(env.up).bill(notice(), "win")
    await env.biller(env.down).bill(notice(), "bill")
    await env.replay()
    assert (len(env.ledger.entries), len(env.sink.seen)) == (1, 1)


@pytest.mark.asyncio
async def test_without_an_id_lease_a_notice_is_deferred_and_later_billed(env: Env) -> None:
    no_ids = Biller(
        env.up, env.ledger, Snowflake(env.clock).next_id, env.clock, [],
        dedup_ttl_ms=TTL_MS, namespace=env.namespace, deferred=env.journal,
    )  # fmt: skip
    assert await no_ids.bill(notice(), "bill") == BillingOutcome.DEFERRED
    assert await env.up.exists(env.key()) == 0
    before = _replayed(BillingOutcome.REJOURNALED)
    await env.replay()
    assert (len(env.ledger.entries), _replayed(BillingOutcome.REJOURNALED)) == (1, before + 1)


@pytest.mark.asyncio
async def test_a_spool_failure_defers_and_keeps_the_key_for_the_replay(env: Env) -> None:
    env.ledger.broken = True
    assert await env.biller(env.up).bill(notice(), "bill") == BillingOutcome.DEFERRED
    assert (
        await env.biller(env.up).bill(notice(), "win") == BillingOutcome.DUPLICATE
    )  # other nodes: no bill
    env.ledger.broken = False
    await env.replay()
    assert len(env.ledger.entries) == 1


@pytest.mark.asyncio
async def test_while_the_spool_still_fails_the_replay_waits(env: Env) -> None:
    env.ledger.broken = True
    await env.biller(env.up).bill(notice(), "bill")
    assert (await env.replay(), env.journal.depth) == (False, 1)


@pytest.mark.asyncio
async def test_when_the_journal_fails_too_the_notice_is_refused_and_the_key_freed(
    env: Env, tmp_path: Path
) -> None:
    broken = DeferredJournal(tmp_path / "never-opened", env.clock)
    env.ledger.broken = True
    with pytest.raises(BillingUnavailable):
        await env.biller(env.up, broken).bill(notice(), "bill")
    await broken.close()
    assert await env.up.exists(env.key()) == 0  # the exchange's retry can bill


@pytest.mark.asyncio
async def test_a_replay_past_the_dedup_horizon_is_billed_and_counted_late(env: Env) -> None:
    await env.biller(env.down).bill(notice(), "bill")
    biller = env.biller(env.up)
    env.clock.set_wall_ms(biller.exact_until_ms(CLAIMS) + 1)
    before = _replayed(BillingOutcome.BILLED_LATE)
    await env.journal.replay(biller.replay)
    assert (len(env.ledger.entries), _replayed(BillingOutcome.BILLED_LATE)) == (1, before + 1)


def _replayed(outcome: BillingOutcome) -> float:
    return sample("bidsim_deferred_replayed_total", {"outcome": outcome.value})


# ------------------------------- live: a paused Valkey, and kill -9 while notices are deferred


@pytest.fixture
def private(aws_endpoint: str) -> Iterator[LocalStack]:
    """A Valkey of this test's own, to pause; the session's moto."""
    with LocalStack(aws_endpoint=aws_endpoint) as stack:
        yield stack


@contextlib.contextmanager
def paused(stack: LocalStack) -> Iterator[None]:
    os.kill(stack.pids["valkey"], signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(stack.pids["valkey"], signal.SIGCONT)


def private_settings(base: Settings, stack: LocalStack, tmp_path: Path) -> Settings:
    return base.replace(
        port=held_port(),
        admin_port=0,
        valkey_url=stack.valkey_url,
        spend_stream=f"spend-{uuid.uuid4().hex[:10]}",
        spool_dir=tmp_path / "spool",
        notice_keys=(("k1", KEY),),
        key_namespace=f"defer-{uuid.uuid4().hex[:8]}",
    )


def burls(client: LiveBidder, count: int) -> list[str]:
    """Billing notice paths of ``count`` fresh bids (waits for pacing leases)."""
    paths: list[str] = []
    for _ in range(400):
        if len(paths) == count:
            return paths
        answer = client.post(with_fresh_user(SIMPLE_BANNER))
        if answer.status != 200:  # no pacing lease yet
            time.sleep(0.05)  # waiting for the reconciler, not for time to pass
            continue
        bid = orjson.loads(answer.body)["seatbid"][0]["bid"][0]
        parts = urlsplit(bid["burl"].replace("${AUCTION_PRICE}", "0.00001"))
        paths.append(f"{parts.path}?{parts.query}")
    raise AssertionError(f"only {len(paths)} bids of {count}")


def bid_id_of(path: str) -> int:
    return SIGNER.verify(parse_qs(urlsplit(path).query)["t"][0]).bid_id


def wait_until(done: Callable[[], bool]) -> None:
    for _ in range(300):  # waiting for the replayer's next attempt (every second)
        if done():
            return
        time.sleep(0.1)
    raise AssertionError("the deferred notices were never settled")


def streamed_through_barrier(client: LiveBidder, settings: Settings) -> list[int]:
    """Bid ids in the spend stream once a fresh notice, billed after all else, is there."""
    [barrier] = burls(client, 1)
    assert client.get(barrier).status == 204
    kinesis = aws_client("kinesis", settings.aws_endpoint or "")
    for _ in range(300):
        ids = [int(e.bid_id) for e in read_ledger(kinesis, settings.spend_stream)]
        if bid_id_of(barrier) in ids:
            return [bid_id for bid_id in ids if bid_id != bid_id_of(barrier)]
        time.sleep(0.1)  # waiting for the background shipper, not for time to pass
    raise AssertionError("the barrier notice never reached the spend stream")


@pytest.mark.chaos
def test_a_notice_deferred_while_valkey_is_paused_is_billed_once_when_it_returns(
    bidder_settings: Settings, private: LocalStack, tmp_path: Path
) -> None:
    settings = private_settings(bidder_settings, private, tmp_path)
    with LiveBidder(settings) as bidder:
        assert bidder.state is not None and bidder.state.biller.deferred is not None
        journal, sink = bidder.state.biller.deferred, Sink()
        bidder.state.impression_sinks.append(sink)
        [path] = burls(bidder, 1)
        with paused(private):
            status = bidder.get(path).status
            billed_while_paused = len(sink.seen)
        wait_until(lambda: journal.depth == 0 and len(sink.seen) == 1)
        repeat = bidder.get(path).status
        sunk = [i.claims.bid_id for i in sink.seen]
        streamed = streamed_through_barrier(bidder, settings)
    assert (status, billed_while_paused, repeat) == (202, 0, 204)
    assert (streamed, sunk) == ([bid_id_of(path)], [bid_id_of(path)])


@pytest.mark.chaos
def test_notices_deferred_before_a_kill_9_are_billed_exactly_once_after_restart(
    bidder_settings: Settings, private: LocalStack, tmp_path: Path
) -> None:
    settings = private_settings(bidder_settings, private, tmp_path)
    prepare_resources(settings)
    with running_reconciler(settings):
        node = Node(settings)
        try:
            paths = burls(node.bidder, 6)
            with paused(private):
                statuses = [node.bidder.get(path).status for path in paths]
                node.kill9()  # the notices exist only in its journal now
        finally:
            node.kill9()
        restarted = Node(settings)
        try:
            kinesis = aws_client("kinesis", settings.aws_endpoint or "")
            _wait_for_stream(kinesis, settings.spend_stream, len(paths))
            repeats = [restarted.bidder.get(path).status for path in paths]
            streamed = streamed_through_barrier(restarted.bidder, settings)
        finally:
            restarted.kill9()
    assert (statuses, repeats) == ([202] * len(paths), [204] * len(paths))
    assert sorted(streamed) == sorted(bid_id_of(path) for path in paths)
