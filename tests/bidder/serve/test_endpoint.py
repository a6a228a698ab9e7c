"""The bid endpoint's handling of bodies, encodings, limits and notices."""

from __future__ import annotations

import gzip
import http.client
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson

from tests.bidder.conftest import EXTERNAL
from tests.bidder.live import LiveBidder
from tests.bidder.openrtb_checks import with_fresh_user

SIMPLE_BANNER = (EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json").read_bytes()


def test_gzip_body_is_decoded(live_bidder: LiveBidder) -> None:
    answer = live_bidder.post(gzip.compress(SIMPLE_BANNER), {"Content-Encoding": "gzip"})
    assert answer.status == 200


def test_corrupt_gzip_is_invalid(live_bidder: LiveBidder) -> None:
    answer = live_bidder.post(b"\x1f\x8b\x08\x00garbage", {"Content-Encoding": "gzip"})
    assert (answer.status, answer.reason) == (204, "invalid")


def test_truncated_gzip_is_invalid(live_bidder: LiveBidder) -> None:
    answer = live_bidder.post(gzip.compress(SIMPLE_BANNER)[:-12], {"Content-Encoding": "gzip"})
    assert (answer.status, answer.reason) == (204, "invalid")


def test_gzip_bomb_is_invalid(live_bidder: LiveBidder) -> None:
    bomb = gzip.compress(b" " * (live_bidder.settings.max_body_bytes * 8))
    answer = live_bidder.post(bomb, {"Content-Encoding": "gzip"})
    assert (answer.status, answer.reason) == (204, "invalid")


def test_unsupported_encoding_is_invalid(live_bidder: LiveBidder) -> None:
    answer = live_bidder.post(SIMPLE_BANNER, {"Content-Encoding": "br"})
    assert (answer.status, answer.reason) == (204, "invalid")


def test_body_over_the_cap_is_invalid(live_bidder: LiveBidder) -> None:
    answer = live_bidder.post(b" " * (live_bidder.settings.max_body_bytes + 1) + SIMPLE_BANNER)
    assert (answer.status, answer.reason) == (204, "invalid")


def test_chunked_body_over_the_cap_is_invalid(live_bidder: LiveBidder) -> None:
    conn = http.client.HTTPConnection(
        live_bidder.settings.host, live_bidder.settings.port, timeout=10
    )
    chunks = (b" " * 65536 for _ in range(live_bidder.settings.max_body_bytes // 65536 + 2))
    conn.request("POST", "/openrtb2/bid", body=chunks, encode_chunked=True)
    resp = conn.getresponse()
    assert (resp.status, resp.getheader("X-Nbr-Reason")) == (204, "invalid")
    conn.close()


def test_non_json_is_invalid_with_nbr_code(live_bidder: LiveBidder) -> None:
    answer = live_bidder.post(b"<xml/>")
    assert (answer.status, answer.reason, answer.headers.get("x-nbr")) == (204, "invalid", "2")


def test_no_bid_names_its_reason(live_bidder: LiveBidder) -> None:
    request = orjson.loads(SIMPLE_BANNER)
    request["imp"][0]["banner"] = {"w": 1, "h": 1}
    answer = live_bidder.post(orjson.dumps(request))
    assert (answer.status, answer.reason) == (204, "format")


def test_tmax_inside_the_network_allowance_is_a_deadline_no_bid(live_bidder: LiveBidder) -> None:
    request = orjson.loads(SIMPLE_BANNER)
    request["tmax"] = int(live_bidder.settings.network_allowance_ms)
    answer = live_bidder.post(orjson.dumps(request))
    assert (answer.status, answer.reason) == (204, "deadline")


# ----------------------------------------------------------------------- notices


def _bid(live_bidder: LiveBidder) -> dict[str, Any]:
    answer = live_bidder.post(with_fresh_user(SIMPLE_BANNER))
    bid: dict[str, Any] = orjson.loads(answer.body)["seatbid"][0]["bid"][0]
    return bid


def _path(url: str, price: str) -> str:
    parts = urlsplit(url.replace("${AUCTION_PRICE}", price))
    return f"{parts.path}?{parts.query}"


def _notice(live_bidder: LiveBidder, kind: str, price: str | None = None) -> int:
    """A notice for a fresh bid, clearing at ``price`` (default: half the bid)."""
    bid = _bid(live_bidder)
    cleared = price if price is not None else f"{bid['price'] / 2:.6f}"
    return live_bidder.get(_path(bid["nurl" if kind == "win" else "burl"], cleared)).status


def test_win_notice_with_a_price_is_accepted(live_bidder: LiveBidder) -> None:
    assert _notice(live_bidder, "win") in (200, 204)


def test_billing_notice_with_a_price_is_accepted(live_bidder: LiveBidder) -> None:
    assert _notice(live_bidder, "bill") == 204


def test_notice_above_the_bid_price_is_refused(live_bidder: LiveBidder) -> None:
    assert _notice(live_bidder, "bill", "999") == 400


def test_notice_with_the_macro_unsubstituted_is_refused(live_bidder: LiveBidder) -> None:
    assert _notice(live_bidder, "win", "${AUCTION_PRICE}") == 400


def test_refusal_names_its_reason(live_bidder: LiveBidder) -> None:
    answer = live_bidder.get(_path(_bid(live_bidder)["burl"], "999"))
    assert answer.body.startswith(b"above_bid:")


def test_notice_urls_carry_a_token_for_the_bid(live_bidder: LiveBidder) -> None:
    assert live_bidder.state is not None
    bid = _bid(live_bidder)
    token = dict(parse_qsl(urlsplit(bid["burl"]).query))["t"]
    claims = live_bidder.state.signer.verify(token)
    assert (claims.imp_id, claims.campaign_id, claims.creative_id) == ("1", bid["cid"], bid["crid"])


def test_a_repeated_notice_is_still_answered_2xx(live_bidder: LiveBidder) -> None:
    path = _path(_bid(live_bidder)["burl"], "0.00001")
    assert [live_bidder.get(path).status for _ in range(3)] == [204, 204, 204]


def test_without_a_snowflake_id_the_bid_path_answers_204(live_bidder: LiveBidder) -> None:
    assert live_bidder.state is not None
    ids = live_bidder.state.ids
    worker = ids.worker
    assert worker is not None
    ids.revoke()
    try:
        answer = live_bidder.post(SIMPLE_BANNER)
    finally:
        ids.grant(worker, live_bidder.state.clock.wall_ms() + 2_000)
    assert (answer.status, answer.reason) == (204, "ids_unavailable")


def test_an_unknown_path_is_404(live_bidder: LiveBidder) -> None:
    assert live_bidder.get("/openrtb2/auction").status == 404


def test_a_known_path_with_another_method_is_405(live_bidder: LiveBidder) -> None:
    assert live_bidder.get("/openrtb2/bid").status == 405
    assert live_bidder.request("POST", "/notice/win", b"").status == 405
