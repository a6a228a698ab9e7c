"""Billing once per impression (real Valkey), and notices against a live app that must
change nothing when forged, tampered, replayed or expired (real Valkey + moto)."""

from __future__ import annotations

import base64
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import orjson
import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis

from bidder.adapters.aws import aws_client
from bidder.adapters.valkey import connect_async
from bidder.core.clock import ManualClock
from bidder.core.ledger import LedgerEntry
from bidder.core.tokens import NoticeClaims, TokenSigner
from bidder.replay.ledger_audit import read_ledger
from bidder.winloop.billable import BillingOutcome
from bidder.winloop.billing import (
    BilledImpression,
    Biller,
    BillingUnavailable,
    ledger_entry,
)
from bidder.winloop.notices import Notice
from ids.snowflake import Snowflake, decode
from tests.bidder.conftest import EXTERNAL
from tests.bidder.live import LiveBidder
from tests.bidder.openrtb_checks import with_fresh_user
from tests.published import sample

pytestmark = pytest.mark.long(8)

SIMPLE_BANNER = (EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json").read_bytes()
CLAIMS = NoticeClaims(
    bid_id=560_000_000_123_456_789, imp_id="1", campaign_id="harbor-bank-leaderboard",
    advertiser="harbor-bank", creative_id="hb-728x90-savings", user_key="b:u1",
    household_key="h:4:192.0.2.1", max_price_cpm_micros=2_500_000,
    issued_ms=1_767_225_600_000,
)  # fmt: skip


class Ledger:
    """A ledger appender that keeps entries in memory, or fails when told to."""

    def __init__(self) -> None:
        self.entries: list[LedgerEntry] = []
        self.broken = False

    async def append(self, entry: LedgerEntry) -> None:
        if self.broken:
            raise OSError("disk full")
        self.entries.append(entry)


class Sink:
    def __init__(self, fail: bool = False) -> None:
        self.seen: list[BilledImpression] = []
        self.fail = fail

    async def on_billed(self, impression: BilledImpression) -> None:
        self.seen.append(impression)
        if self.fail:
            raise RuntimeError("sink bug")


@dataclasses.dataclass
class Setup:
    biller: Biller
    ledger: Ledger
    sinks: list[Any]
    valkey: aioredis.Redis
    namespace: str


@pytest_asyncio.fixture
async def setup(valkey_url: str) -> AsyncIterator[Setup]:
    valkey = aioredis.Redis.from_url(valkey_url)
    clock = ManualClock()
    ids = Snowflake(clock, worker=3, pause=lambda: clock.advance(0.001))
    ledger, sinks, namespace = Ledger(), [Sink()], f"bill-{uuid.uuid4().hex[:8]}"
    biller = Biller(
        valkey, ledger, ids.next_id, clock, sinks, dedup_ttl_ms=60_000, namespace=namespace
    )
    yield Setup(biller, ledger, sinks, valkey, namespace)
    await valkey.aclose()


def _notice(bid_id: int = CLAIMS.bid_id, price: int = 1_250_000) -> Notice:
    return Notice(dataclasses.replace(CLAIMS, bid_id=bid_id), price)


@pytest.mark.asyncio
async def test_the_first_notice_bills(setup: Setup) -> None:
    assert await setup.biller.bill(_notice(), "win") == BillingOutcome.BILLED


@pytest.mark.asyncio
async def test_a_billed_notice_writes_one_ledger_entry(setup: Setup) -> None:
    await setup.biller.bill(_notice(price=1_250_001), "bill")
    [entry] = setup.ledger.entries
    assert (entry.kind, entry.bid_id, entry.price_cpm_micros, entry.cost_micros) == (
        "bill", str(CLAIMS.bid_id), 1_250_001, 1_251,
    )  # fmt: skip
    assert (entry.campaign_id, entry.advertiser, entry.node) == (
        CLAIMS.campaign_id, CLAIMS.advertiser, decode(entry.ledger_id).worker,
    )  # fmt: skip


@pytest.mark.asyncio
@pytest.mark.parametrize(("first", "second"), [("win", "win"), ("win", "bill"), ("bill", "win")])
async def test_a_second_notice_of_the_impression_is_a_duplicate(
    setup: Setup, first: str, second: str
) -> None:
    results = [
        await setup.biller.bill(_notice(), first),
        await setup.biller.bill(_notice(), second),
    ]
    assert (results, len(setup.ledger.entries)) == (
        [BillingOutcome.BILLED, BillingOutcome.DUPLICATE],
        1,
    )


@pytest.mark.asyncio
async def test_notices_of_different_bids_each_bill(setup: Setup) -> None:
    for bid_id in (1, 2, 3):
        await setup.biller.bill(_notice(bid_id=bid_id), "bill")
    assert len({e.ledger_id for e in setup.ledger.entries}) == 3


@pytest.mark.asyncio
async def test_sinks_hear_of_each_billed_impression_once(setup: Setup) -> None:
    for _ in range(3):
        await setup.biller.bill(_notice(), "bill")
    [impression] = setup.sinks[0].seen
    assert (impression.claims, impression.cost_micros) == (CLAIMS, 1_250)


@pytest.mark.asyncio
async def test_a_failing_sink_neither_fails_the_notice_nor_loses_the_entry(setup: Setup) -> None:
    setup.sinks.insert(0, Sink(fail=True))
    billed = await setup.biller.bill(_notice(), "bill")
    assert (billed, len(setup.ledger.entries), len(setup.sinks[1].seen)) == (
        BillingOutcome.BILLED,
        1,
        1,
    )


@pytest.mark.asyncio
async def test_without_a_journal_an_entry_that_cannot_be_made_durable_is_refused_for_a_retry(
    setup: Setup,
) -> None:
    setup.ledger.broken = True
    with pytest.raises(BillingUnavailable):
        await setup.biller.bill(_notice(), "bill")
    setup.ledger.broken = False
    assert await setup.biller.bill(_notice(), "bill") == BillingOutcome.BILLED  # the retry bills


@pytest.mark.asyncio
async def test_without_a_ledger_id_or_a_journal_nothing_is_billed(
    setup: Setup, valkey_url: str
) -> None:
    clock = ManualClock()
    biller = Biller(
        setup.valkey, setup.ledger, Snowflake(clock).next_id, clock, [], dedup_ttl_ms=60_000,
        namespace=setup.namespace,
    )  # fmt: skip
    with pytest.raises(BillingUnavailable):
        await biller.bill(_notice(), "bill")
    assert await setup.valkey.exists(f"{setup.namespace}:billed:{CLAIMS.bid_id}") == 0


@pytest.mark.asyncio
async def test_an_unreachable_dedup_store_without_a_journal_bills_nothing(setup: Setup) -> None:
    from bidder.stack.child import held_port

    # A worker's client: one attempt, no retries with backoff.
    dead = connect_async(f"redis://127.0.0.1:{held_port()}", timeout_s=0.2)
    clock = ManualClock()
    biller = Biller(
        dead, setup.ledger, Snowflake(clock, worker=1).next_id, clock, [], dedup_ttl_ms=60_000
    )
    with pytest.raises(BillingUnavailable):
        await biller.bill(_notice(), "bill")
    await dead.aclose()
    assert setup.ledger.entries == []


@pytest.mark.asyncio
async def test_the_dedup_key_expires_after_the_window(setup: Setup) -> None:
    await setup.biller.bill(_notice(), "bill")
    ttl = await setup.valkey.pttl(f"{setup.namespace}:billed:{CLAIMS.bid_id}")
    assert 0 < ttl <= 60_000


def test_ledger_entry_rounds_the_cost_up() -> None:
    impression = BilledImpression(CLAIMS, "win", 1_001, 2, 7 << 22 | 5 << 12, 1)
    assert (ledger_entry(impression).cost_micros, ledger_entry(impression).node) == (2, 5)


@pytest.mark.parametrize("mark", [False, True])
def test_the_ledger_entry_carries_the_tokens_unchecked_mark(mark: bool) -> None:
    claims = dataclasses.replace(CLAIMS, caps_unchecked=mark)
    impression = BilledImpression(claims, "win", 1_001, 2, 7 << 22 | 5 << 12, 1)
    assert ledger_entry(impression).caps_unchecked is mark


# ----------------------------------------------------- live app: bad notices change nothing


class Live:
    """The live bidder with a recording sink, and ways to see every effect of a notice."""

    def __init__(self, bidder: LiveBidder, valkey_url: str) -> None:
        assert bidder.state is not None
        self.bidder, self.state = bidder, bidder.state
        self.sink = Sink()
        self.valkey = redis.Redis.from_url(valkey_url)
        self.kinesis = aws_client("kinesis", bidder.settings.aws_endpoint or "")

    def burl(self) -> str:
        answer = self.bidder.post(with_fresh_user(SIMPLE_BANNER))
        assert answer.status == 200, answer.reason
        bid = orjson.loads(answer.body)["seatbid"][0]["bid"][0]
        parts = urlsplit(bid["burl"].replace("${AUCTION_PRICE}", "0.00001"))
        return f"{parts.path}?{parts.query}"

    def claims(self, path: str) -> NoticeClaims:
        return self.state.signer.verify(parse_qs(urlsplit(path).query)["t"][0])

    def with_token(self, path: str, token: str) -> str:
        return urlsplit(path).path + "?" + urlencode({"t": token, "p": "0.00001"})

    def counts(self) -> tuple[float, ...]:
        outcomes = ("billed", "duplicate", "deferred", "unavailable")
        return tuple(_sample("bidsim_notices_total", kind="bill", outcome=o) for o in outcomes)

    def dedup_key_exists(self, bid_id: int) -> bool:
        namespace = self.bidder.settings.key_namespace
        return bool(self.valkey.exists(f"{namespace}:billed:{bid_id}"))

    def streamed_after_barrier(self) -> list[int]:
        """Bid ids in the spend stream, once a fresh valid notice has reached it."""
        barrier = self.burl()
        assert self.bidder.get(barrier).status == 204
        barrier_id = self.claims(barrier).bid_id
        name = self.bidder.settings.spend_stream
        for _ in range(200):
            ids = [int(e.bid_id) for e in read_ledger(self.kinesis, name)]
            if barrier_id in ids:
                return ids
            time.sleep(0.05)  # waiting for the background shipper, not for time to pass
        raise AssertionError("the barrier notice never reached the spend stream")

    def assert_no_effect(self, path: str, bid_id: int, reason: str) -> None:
        before, seen = self.counts(), len(self.sink.seen)
        answer = self.bidder.get(path)
        assert (answer.status, answer.body.split(b":")[0]) == (400, reason.encode())
        assert (self.counts(), len(self.sink.seen)) == (before, seen)
        assert not self.dedup_key_exists(bid_id)
        assert bid_id not in self.streamed_after_barrier()


def _raw(token: str) -> bytes:
    blob = token.split(".")[1]
    return base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4))


def _sample(name: str, **labels: str) -> float:
    return sample(name, labels)


@pytest.fixture(scope="module")
def live(live_bidder: LiveBidder, valkey_url: str) -> Iterator[Live]:
    app = Live(live_bidder, valkey_url)
    app.state.impression_sinks.append(app.sink)
    yield app
    app.state.impression_sinks.remove(app.sink)
    app.valkey.close()


def test_a_valid_notice_bills_once_reaching_sinks_and_stream(live: Live) -> None:
    path = live.burl()
    before = live.counts()
    assert live.bidder.get(path).status == 204
    bid_id = live.claims(path).bid_id
    assert live.counts()[0] == before[0] + 1
    assert [i.claims.bid_id for i in live.sink.seen].count(bid_id) == 1
    assert live.streamed_after_barrier().count(bid_id) == 1


def test_a_forged_notice_changes_nothing(live: Live) -> None:
    path = live.burl()
    claims = live.claims(path)
    forged = TokenSigner({"k1": b"f" * 32}, "k1").sign(claims)
    live.assert_no_effect(live.with_token(path, forged), claims.bid_id, "bad_token")


def test_a_tampered_notice_changes_nothing(live: Live) -> None:
    path = live.burl()
    claims = live.claims(path)
    richer = dataclasses.replace(claims, max_price_cpm_micros=10**12)
    genuine = parse_qs(urlsplit(path).query)["t"][0]
    richer_raw = _raw(TokenSigner({"x": b"x" * 32}, "x").sign(richer))
    tampered_raw = richer_raw[:-16] + _raw(genuine)[-16:]  # richer body, genuine tag
    tampered = genuine.split(".")[0] + "." + base64.urlsafe_b64encode(tampered_raw).decode()
    live.assert_no_effect(live.with_token(path, tampered), claims.bid_id, "bad_token")


def test_an_expired_notice_changes_nothing(live: Live) -> None:
    path = live.burl()
    claims = live.claims(path)
    max_age_ms = round(live.bidder.settings.notice_max_age_s * 1000)
    old = dataclasses.replace(claims, issued_ms=live.state.clock.wall_ms() - max_age_ms - 1000)
    live.assert_no_effect(live.with_token(path, live.state.signer.sign(old)), old.bid_id, "expired")


def test_a_replayed_notice_is_a_duplicate_without_spend(live: Live) -> None:
    path = live.burl()
    bid_id = live.claims(path).bid_id
    assert live.bidder.get(path).status == 204
    before, seen = live.counts(), len(live.sink.seen)
    assert [live.bidder.get(path).status for _ in range(3)] == [204, 204, 204]
    assert live.counts() == (before[0], before[1] + 3, *before[2:])
    assert len(live.sink.seen) == seen
    assert live.streamed_after_barrier().count(bid_id) == 1


def test_a_win_then_a_billing_notice_bill_once(live: Live) -> None:
    path = live.burl()
    bid_id = live.claims(path).bid_id
    win = path.replace("/notice/bill?", "/notice/win?")
    assert live.bidder.get(win).status in (200, 204)
    assert live.bidder.get(path).status == 204
    assert live.streamed_after_barrier().count(bid_id) == 1
