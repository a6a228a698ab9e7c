"""Recorded clicks: a win the recorded market decided counts its line's click, per campaign."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.auction import RECORDED, SYNTHETIC, Settlement, Win
from bidder.bidstream.stream import StreamRecord
from bidder.replay.auction_totals import AuctionTotals, auction_json
from bidder.replay.campaign_outcomes import CampaignOutcomes, outcomes_json, render_campaigns
from bidder.replay.html import write_html
from bidder.replay.replayer import replay
from bidder.replay.report import render_table, to_json
from tests.bidder.replay.test_replayer import bid_request, options

MIDNIGHT_MS = 1_767_225_600_000
RECORDED_PRICE = 1.0
"""Below the stand-in's bid of 5.0 and at the floor: every recorded line wins."""
LINES = [
    # (campaign the stand-in bids for, recorded price, recorded click)
    ("k1", RECORDED_PRICE, True),
    ("k1", RECORDED_PRICE, False),
    ("k1", RECORDED_PRICE, True),
    ("k1", RECORDED_PRICE, None),  # a recorded price, no click record: no click
    ("k2", None, True),  # the synthetic model decides: the click is not counted
    ("k2", None, True),
]


def clicked_records() -> list[StreamRecord]:
    return [
        StreamRecord(
            t_ms=i,
            ts=MIDNIGHT_MS + i,
            ssp=f"bid-{cid}",
            body=orjson.dumps(bid_request(i)),
            market_price=price,
            click=click,
        )
        for i, (cid, price, click) in enumerate(LINES)
    ]


@pytest.mark.asyncio
async def test_a_replay_counts_recorded_clicks_per_campaign(bidder, tmp_path: Path) -> None:
    result = await replay(clicked_records(), bidder.url, options())
    report = to_json(result)
    k1, k2 = report["campaigns"]["k1"], report["campaigns"]["k2"]
    assert (k1["wins"], k1["click_recorded_wins"], k1["clicks"]) == (4, 3, 2)
    assert k1["ctr"] == pytest.approx(2 / 3, abs=1e-6)
    assert (k2["wins"], k2["click_recorded_wins"], k2["clicks"], k2["ctr"]) == (2, 0, 0, None)
    models = report["auction"]["models"]
    assert (models[RECORDED]["clicks"], models[RECORDED]["click_recorded_wins"]) == (2, 3)
    assert (models[SYNTHETIC]["clicks"], models[SYNTHETIC]["ctr"]) == (0, None)

    table = render_table(result)
    assert "clicks 2 (CTR 66.67% of 3 wins with a recorded click)" in table
    assert "a line without a click record counts no click" in table
    k1_row = next(line for line in table.splitlines() if line.split()[:4] == ["k1", "4", "3", "2"])
    assert k1_row.split()[-1] == "66.7%"

    page = tmp_path / "report.html"
    write_html(report, page)
    html = page.read_text()
    assert "clicks (recorded model)" in html and "66.7%" in html


@pytest.mark.asyncio
async def test_a_stream_without_click_records_shows_no_click_table(bidder) -> None:
    records = [r for r in clicked_records() if r.market_price is None]
    result = await replay(records, bidder.url, options())
    table = render_table(result)
    assert "CTR" not in table
    assert to_json(result)["campaigns"]["k2"]["clicks"] == 0


wins = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([True, False, None])), max_size=8
)


@given(st.lists(wins, max_size=12))
def test_clicks_add_up_over_campaigns_and_models(answers: list[list[tuple[str, bool | None]]]):
    outcomes, totals = CampaignOutcomes(), AuctionTotals()
    for answer in answers:
        recorded = all(clicked is not None for _, clicked in answer)
        settlement = Settlement(
            bids=len(answer),
            wins=[Win("1", 2.0, 1.0, None, None, cid, clicked) for cid, clicked in answer],
            model=RECORDED if recorded else SYNTHETIC,
        )
        outcomes.count(settlement, MIDNIGHT_MS)
        totals.count(settlement)
    campaigns = outcomes_json(outcomes)
    models = auction_json(totals)["models"]
    clicks = sum(clicked is True for answer in answers for _, clicked in answer)
    with_record = sum(clicked is not None for answer in answers for _, clicked in answer)
    assert sum(c["clicks"] for c in campaigns.values()) == clicks
    assert sum(m["clicks"] for m in models.values()) == clicks
    assert sum(c["click_recorded_wins"] for c in campaigns.values()) == with_record
    for c in campaigns.values():
        assert c["ctr"] is None if not c["click_recorded_wins"] else 0 <= c["ctr"] <= 1
    assert ("CTR" in render_campaigns(campaigns)) == (with_record > 0)
