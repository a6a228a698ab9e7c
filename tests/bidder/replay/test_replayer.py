"""Open-loop replay against a small real bidder stand-in on loopback."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.auction import Market
from bidder.bidstream.stream import StreamRecord, encode_record, read_stream, write_stream
from bidder.replay.notices import NoticeSend, plan_notices
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import render_table, status_classes, to_json
from bidder.stack.child import held_port

# Competition fixed at exactly the floor (1.0): every bid of 5.0 wins at 1.01 (second price).
FIXED_MARKET = Market(seed=1, median_multiple=1.0, sigma=0.0)


class FakeBidder:
    """Behaviour chosen by the X-Ssp header: bid, bid-<campaign id> (bid- alone: a bid
    naming no campaign; bid-view: notice URLs that carry a token), nobid-<reason>, hold,
    slow, boom."""

    def __init__(self) -> None:
        self.url = ""
        self.arrivals = 0
        self.answered = 0
        self.release = asyncio.Event()
        self.changed = asyncio.Condition()
        self.headers: list[dict[str, str]] = []
        self.notices: list[tuple[str, str, str]] = []
        self.views: list[str] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/openrtb2/bid", self.bid)
        app.router.add_get("/notice/view", self.view)
        app.router.add_get("/notice/{kind}", self.notice)
        return app

    async def bid(self, request: web.Request) -> web.Response:
        async with self.changed:
            self.arrivals += 1
            self.changed.notify_all()
        self.headers.append(dict(request.headers))
        body = orjson.loads(await request.read())
        response = await self._answer(request.headers["X-Ssp"], body["id"], request.host)
        if "X-Campaign-Trace" in request.headers:
            response.headers["X-Campaign-Trace"] = fake_trace(request.headers["X-Ssp"])
        self.answered += 1
        return response

    async def _answer(self, ssp: str, request_id: str, host: str) -> web.Response:
        if ssp == "bid" or ssp.startswith("bid-"):
            cid = ssp[4:] if ssp.startswith("bid-") else "k1"
            body = bid_response(request_id, host, cid, token=cid == "view")
            return web.Response(body=body, content_type="application/json")
        if ssp.startswith("nobid-"):
            return web.Response(status=204, headers={"X-Nbr-Reason": ssp[6:], "X-Nbr": "0"})
        if ssp == "hold":
            await self.release.wait()
        if ssp == "slow":
            await asyncio.sleep(0.005)
        if ssp == "boom":
            return web.Response(status=500)
        return web.Response(status=204, headers={"X-Nbr-Reason": "deadline"})

    async def notice(self, request: web.Request) -> web.Response:
        self.notices.append(
            (request.match_info["kind"], request.query["bid"], request.query["price"])
        )
        return web.Response(text="ok")

    async def view(self, request: web.Request) -> web.Response:
        self.views.append(request.query_string)
        return web.Response(status=204)


def fake_trace(ssp: str) -> str:
    """The stand-in's campaign trace: a bid-<cid> request had <cid> and "k9" eligible,
    k9 over a cap, and <cid> shaded to 0.8; a capped no-bid had k9 eligible and capped."""
    if ssp.startswith("bid-") and ssp[4:]:
        return f"eligible={ssp[4:]},k9;capped=k9;shading={ssp[4:]}:0.8"
    if ssp == "nobid-capped":
        return "eligible=k9;capped=k9;shading="
    return "eligible=;capped=;shading="


def bid_response(request_id: str, host: str, cid: str = "k1", token: bool = False) -> bytes:
    bid_id = f"bid-{request_id}"
    bid = {"id": bid_id, "impid": "1", "price": 5.0, "crid": "c1", "adomain": ["a.com"]}
    if cid:
        bid["cid"] = cid
    for field, kind in (("nurl", "win"), ("burl", "bill")):
        signed = f"t=tok-{bid_id}&" if token else ""
        bid[field] = f"http://{host}/notice/{kind}?{signed}bid={bid_id}&price=${{AUCTION_PRICE}}"
    return orjson.dumps({"id": request_id, "cur": "USD", "seatbid": [{"seat": "s", "bid": [bid]}]})


def bid_request(i: int) -> dict:
    return {
        "id": f"r{i}",
        "at": 2,
        "imp": [{"id": "1", "bidfloor": 1.0, "banner": {"w": 300, "h": 250}}],
    }


def records(kinds: list[str], gap_ms: int = 1) -> list[StreamRecord]:
    return [
        StreamRecord(
            t_ms=i * gap_ms, ts=1_767_225_600_000 + i, ssp=kind, body=orjson.dumps(bid_request(i))
        )
        for i, kind in enumerate(kinds)
    ]


def options(**overrides) -> ReplayOptions:
    return ReplayOptions(**{"rate": 2000.0, "market": FIXED_MARKET, **overrides})


@pytest.mark.asyncio
async def test_counts_answers_by_status_and_no_bid_reason(bidder):
    kinds = ["bid"] * 2 + ["nobid-geo"] * 3 + ["nobid-invalid"] + ["boom"]
    result = await replay(records(kinds), bidder.url, options())
    assert result.requests == 7
    assert status_classes(result.status) == {"200": 2, "204": 4, "5xx": 1, "other": 0}
    assert dict(result.nbr_reasons) == {"geo": 3, "invalid": 1}
    assert result.samples == 7
    assert result.within_deadline <= 6  # the 500 never counts as answered in time


@pytest.mark.asyncio
async def test_requests_carry_the_openrtb_version_and_ssp_headers(bidder):
    await replay(records(["nobid-geo"]), bidder.url, options())
    (headers,) = bidder.headers
    assert headers["X-Openrtb-Version"] == "2.6"
    assert headers["X-Ssp"] == "nobid-geo"
    assert headers["Content-Type"] == "application/json"


@pytest.mark.asyncio
async def test_sends_continue_while_earlier_requests_are_pending(bidder):
    replaying = asyncio.create_task(
        replay(records(["hold"] * 20), bidder.url, options(timeout_ms=5000))
    )
    async with asyncio.timeout(3), bidder.changed:
        await bidder.changed.wait_for(lambda: bidder.arrivals == 20)
    assert bidder.answered == 0  # all 20 arrived while none had been answered
    bidder.release.set()
    result = await replaying
    assert result.status[204] == 20


@pytest.mark.asyncio
async def test_queued_requests_have_corrected_latency_above_uncorrected(bidder):
    # One connection, 5 ms per answer, a request every 1 ms: requests queue in the client.
    result = await replay(
        records(["slow"] * 10), bidder.url, options(rate=1000.0, max_connections=1)
    )
    assert result.status[204] == 10
    assert result.corrected.get_mean_value() > result.uncorrected.get_mean_value()
    assert result.corrected.get_max_value() >= result.uncorrected.get_max_value()


@pytest.mark.asyncio
async def test_answers_late_only_from_client_queueing_count_within_from_the_write(bidder):
    # As above: the last request waits for the 9 answers before it (5 ms each) on the one
    # connection, so it is at least 41 ms late from its intended send; each answer takes
    # about 5 ms from its own write.
    opts = options(rate=1000.0, max_connections=1, deadline_ms=30.0)
    result = await replay(records(["slow"] * 10), bidder.url, opts)
    assert result.within_deadline < result.within_deadline_from_write <= 10
    assert to_json(result)["within_deadline_from_write_share"] == (
        result.within_deadline_from_write / 10
    )


@pytest.mark.asyncio
async def test_timeouts_are_counted_and_recorded_as_lower_bounds(bidder):
    result = await replay(records(["hold"] * 5), bidder.url, options(timeout_ms=30))
    assert result.timeouts == 5
    assert sum(result.status.values()) == 0
    assert result.samples == 5
    assert result.within_deadline == result.within_deadline_from_write == 0


@pytest.mark.asyncio
async def test_winners_get_win_then_bill_notices_with_the_clearing_price(bidder):
    result = await replay(records(["bid"] * 5), bidder.url, options())
    auction = result.auction
    assert (auction.bids, auction.wins, auction.spend_micros) == (5, 5, 5 * 1010)
    assert (auction.notices_sent, auction.notices_ok, auction.notices_failed) == (10, 10, 0)
    for i in range(5):
        calls = [(kind, price) for kind, bid, price in bidder.notices if bid == f"bid-r{i}"]
        assert calls == [("win", "1.01"), ("bill", "1.01")]


@pytest.mark.asyncio
async def test_wins_drawn_viewable_send_their_token_to_the_view_notice(bidder):
    opts = options(view_rates={"banner": 1.0}, notice_drain_s=5.0)
    result = await replay(records(["bid-view"] * 4), bidder.url, opts)
    assert sorted(bidder.views) == [f"t=tok-bid-r{i}" for i in range(4)]
    assert (result.views.drawn, result.views.viewable) == ({"banner": 4}, {"banner": 4})
    assert (result.views.notices_ok, result.views.notices_failed) == (4, 0)


@pytest.mark.asyncio
async def test_a_format_whose_rate_is_zero_never_becomes_viewable(bidder):
    result = await replay(records(["bid-view"] * 4), bidder.url, options(view_rates={}))
    assert (bidder.views, result.views.viewable) == ([], {"banner": 0})


@pytest.mark.asyncio
async def test_notices_can_be_turned_off(bidder):
    result = await replay(records(["bid"] * 3), bidder.url, options(notices=False))
    assert result.auction.wins == 3
    assert bidder.notices == []


@pytest.mark.asyncio
async def test_warmup_requests_are_sent_but_not_measured(bidder):
    # Recorded 1 ms apart, real time: the first 10 fall inside a 10 ms warm-up.
    opts = options(rate=None, speed=1.0, warmup_s=0.010)
    result = await replay(records(["nobid-geo"] * 20), bidder.url, opts)
    assert bidder.arrivals == 20
    assert (result.warmup_requests, result.requests, result.samples) == (10, 10, 10)
    assert result.nbr_reasons["geo"] == 10


@pytest.mark.asyncio
async def test_unreachable_bidder_counts_transport_errors():
    result = await replay(records(["bid"] * 3), f"http://127.0.0.1:{held_port()}", options())
    assert (result.requests, result.transport_errors, result.samples) == (3, 3, 0)


@pytest.mark.asyncio
async def test_stream_file_is_looped_until_the_duration(bidder, tmp_path):
    path = tmp_path / "stream.jsonl.gz"
    write_stream(path, (encode_record(i, 0, "nobid-geo", request=bid_request(i)) for i in range(3)))
    result = await replay(read_stream(path), bidder.url, options(rate=1000.0, duration_s=0.010))
    assert result.requests == bidder.arrivals == 10


@pytest.mark.asyncio
async def test_report_has_stable_json_keys_and_a_readable_table(bidder):
    result = await replay(records(["bid", "nobid-geo", "nobid-geo"]), bidder.url, options())
    summary = to_json(result)
    assert {
        "requests", "warmup_requests", "duration_s", "rate_rps", "status", "nbr_reasons",
        "latency_ms", "within_deadline_share", "deadline_ms", "timeouts", "transport_errors",
        "late_sends", "max_send_lag_ms", "auction", "samples", "p99_9_reliable",
        "within_deadline_from_write_share",
    } <= summary.keys()  # fmt: skip
    assert set(summary["latency_ms"]["corrected"]) == {"p50", "p90", "p99", "p99_9", "max"}
    assert summary["nbr_reasons"] == {"geo": 2}
    assert summary["p99_9_reliable"] is False
    assert orjson.loads(orjson.dumps(summary)) == summary
    table = render_table(result)
    for text in (
        "achieved rate",
        "geo",
        "p99.9 (*)",
        "corrected",
        "within 8 ms deadline",
        "from the write",
        "wins 1",
    ):
        assert text in table


@pytest.mark.asyncio
async def test_progress_bar_goes_to_stderr(bidder, capsys):
    await replay(records(["nobid-geo"] * 3), bidder.url, options(), progress=True)
    captured = capsys.readouterr()
    assert "req" in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(
    "bad", [{"timeout_ms": 0}, {"speed": 0}, {"warmup_s": -1}, {"max_connections": 0}]
)
def test_bad_options_are_refused_up_front(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        ReplayOptions(**bad)


@pytest.mark.asyncio
async def test_target_must_be_plain_http():
    with pytest.raises(ValueError, match="http://"):
        await replay([], "https://bidder.example", ReplayOptions())


# --- notice faults: duplicates and reordering ------------------------------------------

URLS = st.lists(
    st.text(alphabet="abcdefghij0123456789/:?=&.", min_size=1, max_size=40),
    min_size=1,
    max_size=2,
    unique=True,
)
FAULTS = st.builds(
    ReplayOptions,
    duplicate_notices=st.floats(0, 1),
    reorder_notices=st.booleans(),
    notice_window_ms=st.floats(0, 1000),
    market=st.builds(Market, seed=st.integers(0, 2**32)),
)


@given(URLS)
def test_without_faults_notices_go_at_once_win_then_bill(urls):
    assert plan_notices(urls, ReplayOptions()) == [NoticeSend(0.0, tuple(urls))]


@given(URLS, FAULTS)
def test_each_notice_is_planned_once_in_some_order_plus_at_most_one_copy(urls, faults):
    first, *copies = plan_notices(urls, faults)
    assert sorted(first.urls) == sorted(urls)
    assert len(copies) <= 1
    assert all(len(copy.urls) == 1 and copy.urls[0] in urls for copy in copies)


@given(URLS, FAULTS)
def test_planned_notices_start_at_most_two_and_a_half_windows_after_the_win(urls, faults):
    window_s = faults.notice_window_ms / 1000
    for planned in plan_notices(urls, faults):
        assert 0 <= planned.delay_s <= 2.5 * window_s


@given(URLS, FAULTS)
def test_the_same_win_gets_the_same_faults(urls, faults):
    assert plan_notices(urls, faults) == plan_notices(list(urls), faults)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_duplicate_share_of_zero_or_one_is_never_or_always(share):
    opts = ReplayOptions(duplicate_notices=share)
    plans = [
        plan_notices([f"http://x/win?t={i}", f"http://x/bill?t={i}"], opts) for i in range(200)
    ]
    assert {len(plan) for plan in plans} == {1 + int(share)}


def test_reordering_sends_about_half_the_bills_first():
    opts = ReplayOptions(reorder_notices=True)
    plans = [
        plan_notices([f"http://x/win?t={i}", f"http://x/bill?t={i}"], opts) for i in range(1000)
    ]
    bills_first = sum(plan[0].urls[0].startswith("http://x/bill") for plan in plans)
    assert 400 <= bills_first <= 600


@pytest.mark.asyncio
async def test_duplicated_notices_reach_the_bidder_as_extra_copies(bidder):
    result = await replay(records(["bid"] * 10), bidder.url, options(duplicate_notices=1.0))
    auction = result.auction
    assert (auction.notices_sent, auction.notices_ok, auction.notices_failed) == (30, 30, 0)
    for i in range(10):
        kinds = sorted(kind for kind, bid, _ in bidder.notices if bid == f"bid-r{i}")
        assert kinds in (["bill", "bill", "win"], ["bill", "win", "win"])


@pytest.mark.asyncio
async def test_reordered_notices_send_some_bills_before_their_win(bidder):
    await replay(records(["bid"] * 20), bidder.url, options(reorder_notices=True))
    orders = {
        bid: [kind for kind, b, _ in bidder.notices if b == bid]
        for bid in {bid for _, bid, _ in bidder.notices}
    }
    assert len(orders) == 20
    assert all(sorted(kinds) == ["bill", "win"] for kinds in orders.values())
    assert ["bill", "win"] in orders.values()


@pytest.mark.asyncio
async def test_reordered_notices_of_different_wins_interleave(bidder):
    await replay(records(["bid"] * 20), bidder.url, options(reorder_notices=True))
    first_seen = list(dict.fromkeys(bid for _, bid, _ in bidder.notices))
    assert first_seen != [f"bid-r{i}" for i in range(20)]


@pytest.mark.parametrize("bad", [{"duplicate_notices": 1.5}, {"duplicate_notices": -0.1}])
def test_a_duplicate_share_outside_zero_to_one_is_refused(bad):
    with pytest.raises(ValueError, match="duplicate_notices"):
        ReplayOptions(**bad)


def test_a_negative_notice_window_is_refused():
    with pytest.raises(ValueError, match="notice_window_ms"):
        ReplayOptions(notice_window_ms=-1)
