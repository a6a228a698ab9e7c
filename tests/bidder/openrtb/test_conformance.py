"""Every public OpenRTB example gets a valid 200 or a 204 with a reason, never a 5xx.

The corpus is read from ../shared/external/openrtb/requests at run time (it is
not ours to copy). Files the corpus marks INVALID must be refused as invalid.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.bidder.conftest import EXTERNAL
from tests.bidder.live import LiveBidder
from tests.bidder.openrtb_checks import answer_problems

REQUESTS = sorted((EXTERNAL / "requests").glob("*.json"))


def test_the_corpus_is_there() -> None:
    assert len(REQUESTS) >= 70, f"expected the shared OpenRTB corpus under {EXTERNAL}"


@pytest.mark.parametrize("path", REQUESTS, ids=lambda p: p.stem)
def test_corpus_request_gets_a_valid_answer(live_bidder: LiveBidder, path: Path) -> None:
    answer = live_bidder.post(path.read_bytes())
    request = orjson.loads(path.read_bytes())
    assert answer_problems(request, answer.status, answer.headers, answer.body) == []
    if "INVALID" in path.name:
        assert (answer.status, answer.reason) == (204, "invalid")


def test_simple_banner_from_the_spec_gets_a_bid(live_bidder: LiveBidder) -> None:
    # The benchmark workload: the bundled campaigns must bid on it (full path).
    path = EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json"
    answer = live_bidder.post(path.read_bytes())
    assert answer.status == 200
    bid = orjson.loads(answer.body)["seatbid"][0]["bid"][0]
    assert bid["impid"] == "1"
    assert bid["price"] >= 0.03
