"""The bidder tells a replay which campaigns were eligible, capped and how bids were shaded.

A live bidder on the bundled campaigns (``fixtures/openrtb/campaigns.json``) and a
hand-made stream whose eligible campaigns are known from the campaign file alone:

- a 300x250 banner on a US site: only ``brightleaf-remnant-mrec`` (any country, site,
  300x250; ``meadow-home-spring-sale`` has the size but is paused);
- the same on a German site: ``brightleaf-remnant-mrec`` and ``alpenrail-dach``
  (DEU/AUT/CHE, site or app, 300x250);
- a 320x50 banner in a US phone app: only ``pixelforge-app-install`` (``fizzwick`` is
  site only, ``sakura`` JPN/IND);
- a 320x50 banner on a French site: none.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson

from bidder.bidstream.stream import StreamRecord
from bidder.pipeline.campaign_trace import parse_header
from bidder.replay.replayer import ReplayOptions, replay
from bidder.replay.report import to_json
from tests.bidder.live import REPO, LiveBidder

MIDNIGHT_MS = 1_767_225_600_000


def _site(country: str, w: int, h: int, at: int) -> dict[str, Any]:
    return {
        "at": at,
        "imp": [{"id": "1", "bidfloor": 0.01, "banner": {"w": w, "h": h}}],
        "site": {"id": "s1", "domain": "www.example.com", "page": "https://www.example.com/"},
        "device": {"devicetype": 2, "ua": "Mozilla/5.0", "geo": {"country": country}},
        "regs": {"gdpr": 0},  # else a German device without a TC string ends at consent
    }


def _app(country: str, w: int, h: int, at: int) -> dict[str, Any]:
    return {
        "at": at,
        "imp": [{"id": "1", "bidfloor": 0.01, "banner": {"w": w, "h": h}}],
        "app": {"id": "a1", "bundle": "com.example.puzzle"},
        "device": {"devicetype": 4, "os": "android", "geo": {"country": country}},
    }


STREAM = (
    [_site("USA", 300, 250, at=1)] * 3
    + [_site("DEU", 300, 250, at=1)] * 2
    + [_app("USA", 320, 50, at=2)] * 4
    + [_site("FRA", 320, 50, at=1)] * 2
)
ELIGIBLE = {"brightleaf-remnant-mrec": 5, "alpenrail-dach": 2, "pixelforge-app-install": 4}


def _records() -> list[StreamRecord]:
    return [
        StreamRecord(
            t_ms=i * 5,
            ts=MIDNIGHT_MS + i,
            ssp="s1",
            body=orjson.dumps({**doc, "id": f"r{i}", "user": {"id": f"u{i}"}}),
        )
        for i, doc in enumerate(STREAM)
    ]


def _replayed(live_bidder: LiveBidder, **overrides: Any) -> dict[str, Any]:
    settings = live_bidder.settings
    url = f"http://{settings.host}:{settings.port}/openrtb2/bid"
    # A generous timeout: on a busy machine a late answer would be missing from the counts.
    options = ReplayOptions(rate=100.0, timeout_ms=2_000.0, notices=False, **overrides)
    return to_json(asyncio.run(replay(_records(), url, options)))


def test_the_eligible_count_is_each_campaigns_matching_requests(live_bidder: LiveBidder) -> None:
    report = _replayed(live_bidder, campaign_trace=True)
    assert report["campaign_traced_answers"] == len(STREAM)
    eligible = {
        name: c["requests_eligible"]
        for name, c in report["campaigns"].items()
        if c["requests_eligible"]
    }
    assert eligible == ELIGIBLE


def test_the_traced_bids_add_up_to_the_bids(live_bidder: LiveBidder) -> None:
    report = _replayed(live_bidder, campaign_trace=True)
    campaigns = report["campaigns"].values()
    assert report["auction"]["bids"] > 0
    assert sum(c["bids"] for c in campaigns) == report["auction"]["bids"]
    for c in campaigns:
        assert c["bids"] <= c["requests_eligible"]
        assert (c["avg_shading"] is None) == (c["bids"] == 0)
        assert c["avg_shading"] is None or 0 < c["avg_shading"] <= 1


def test_second_price_bids_are_not_shaded(live_bidder: LiveBidder) -> None:
    report = _replayed(live_bidder, campaign_trace=True)
    pixelforge = report["campaigns"]["pixelforge-app-install"]  # only in the at=2 requests
    assert pixelforge["bids"] > 0
    assert pixelforge["avg_shading"] == 1.0


def test_a_request_that_does_not_ask_gets_no_trace(live_bidder: LiveBidder) -> None:
    body = orjson.dumps({**STREAM[0], "id": "plain"})
    plain = live_bidder.post(body)
    asked = live_bidder.post(body, {"X-Campaign-Trace": "1"})
    assert "x-campaign-trace" not in plain.headers
    assert parse_header(asked.headers["x-campaign-trace"]).eligible == ("brightleaf-remnant-mrec",)


def test_a_request_answered_capped_names_its_capped_campaign(live_bidder: LiveBidder) -> None:
    # Northwind's 30 s spot, the only candidate here, reserves at bid and keeps a
    # 30-minute gap per creative: the person's second request finds it capped.
    case = orjson.loads((REPO / "fixtures/openrtb/cases/001_ctv-video-us.json").read_bytes())
    person = uuid.uuid4().hex
    doc = {**case["request"], "user": {"id": person}}
    doc["device"] = {**doc["device"], "ip": f"198.51.100.{int(person[:2], 16) % 250 + 1}"}
    answers = [live_bidder.post(orjson.dumps(doc), {"X-Campaign-Trace": "1"}) for _ in range(3)]
    traces = [parse_header(answer.headers["x-campaign-trace"]) for answer in answers]
    assert [answer.status for answer in answers] == [200, 204, 204]
    assert [answer.reason for answer in answers[1:]] == ["capped", "capped"]
    assert [trace.capped for trace in traces] == [(), *[("northwind-ctv-us-ca",)] * 2]
    assert all(trace.eligible == ("northwind-ctv-us-ca",) for trace in traces)
    assert traces[0].shading == (("northwind-ctv-us-ca", 1.0),)  # base-priced: never shaded
