"""Per-campaign outcomes: they add up to the totals, and budgets and targets read right."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.auction import Offer, Settlement, Win
from bidder.core.campaigns import Campaign
from bidder.pipeline.campaign_trace import TraceFigures
from bidder.replay.campaign_outcomes import NO_CID, CampaignOutcomes, budgets_of, outcomes_json
from bidder.replay.replayer import replay
from bidder.replay.report import render_table, to_json
from pacing.curves import DAY_MS, STANDARD
from tests.bidder.replay.test_replayer import options, records

MIDNIGHT_MS = 1_767_225_600_000  # 2026-01-01 00:00 UTC, where test records start


def campaign(cid: str, budget_micros: int = 1_000_000, curve: str = "default") -> Campaign:
    return Campaign(
        id=cid,
        advertiser="adv",
        daily_budget_micros=budget_micros,
        base_bid_cpm_micros=1_000_000,
        max_bid_cpm_micros=5_000_000,
        creatives=(),
        pacing_curve=curve,
    )


KINDS = ["bid-k1"] * 4 + ["bid-k2"] * 3 + ["bid-"] * 2 + ["nobid-capped"] * 2


@pytest.mark.asyncio
async def test_per_campaign_figures_add_up_to_the_totals(bidder):
    result = await replay(records(KINDS), bidder.url, options())
    report = to_json(result)
    campaigns = report["campaigns"]
    for figure in ("bids", "wins", "spend_micros"):
        assert sum(c[figure] for c in campaigns.values()) == report["auction"][figure]
    assert report["auction"]["bids"] == 9
    assert {name: c["bids"] for name, c in campaigns.items()} == {"k1": 4, "k2": 3, NO_CID: 2}


@pytest.mark.asyncio
async def test_spend_is_measured_against_the_campaign_file_budget(bidder):
    opts = options(budgets=budgets_of([campaign("k1", 2_000_000), campaign("idle")]))
    result = await replay(records(KINDS), bidder.url, opts)
    campaigns = to_json(result)["campaigns"]
    k1 = campaigns["k1"]
    # Every bid of 5.0 wins at 1.01 CPM: 1,010 micros an impression.
    assert (k1["wins"], k1["spend_micros"]) == (4, 4 * 1_010)
    assert k1["spend_share_of_budget"] == pytest.approx(4 * 1_010 / 2_000_000)
    assert k1["ecpm_usd"] == pytest.approx(1.01)
    assert campaigns["idle"]["bids"] == 0  # a budgeted campaign that never bid still shows
    assert campaigns["k2"]["daily_budget_micros"] is None  # not in the file: no budget
    # Not asked for the campaign trace, no campaign file caps: those figures are unknown.
    for figure in ("requests_eligible", "capped_no_bids", "avg_shading", "over_cap"):
        assert campaigns["k1"][figure] is None, figure


@pytest.mark.asyncio
async def test_the_terminal_report_has_a_row_per_campaign(bidder):
    result = await replay(records(KINDS), bidder.url, options())
    table = render_table(result)
    assert "per campaign" in table
    assert "eligible" in table and "over cap" in table
    for name in ("k1", "k2", NO_CID):
        assert table.count(f"\n  {name} ") == 2  # a row in each of the two tables


@pytest.mark.asyncio
async def test_the_bidders_campaign_trace_is_counted_per_campaign(bidder):
    result = await replay(records(KINDS), bidder.url, options(campaign_trace=True))
    report = to_json(result)
    campaigns = report["campaigns"]
    assert report["campaign_traced_answers"] == len(KINDS)
    # fake_trace: each bid-<cid> request had <cid> and k9 eligible and k9 capped; each
    # capped no-bid had k9 eligible and capped; the bids naming no campaign, nothing.
    eligible = {name: c["requests_eligible"] for name, c in campaigns.items()}
    assert eligible == {"k1": 4, "k2": 3, "k9": 4 + 3 + 2, NO_CID: 0}
    assert campaigns["k9"]["capped_no_bids"] == 9 and campaigns["k1"]["capped_no_bids"] == 0
    assert campaigns["k1"]["avg_shading"] == pytest.approx(0.8)
    assert campaigns["k9"]["avg_shading"] is None  # it never bid
    # every request answered 'capped' had a campaign refused by a cap
    assert sum(c["capped_no_bids"] for c in campaigns.values()) >= report["nbr_reasons"]["capped"]
    for c in campaigns.values():  # the hours add up to the day
        assert sum(c["requests_eligible_by_hour"]) == c["requests_eligible"]
        assert sum(c["capped_no_bids_by_hour"]) == c["capped_no_bids"]


@given(st.lists(st.tuples(st.integers(0, DAY_MS - 1), st.booleans()), max_size=30))
def test_traced_answers_are_counted_in_their_requests_hour(answers):
    outcomes = CampaignOutcomes()
    for offset, capped in answers:
        trace = TraceFigures(eligible=("a",), capped=("a",) if capped else ())
        outcomes.note_trace(trace, MIDNIGHT_MS + offset)
    a = outcomes_json(outcomes).get("a")
    eligible, capped_hours = [0] * 24, [0] * 24
    for offset, capped in answers:
        eligible[offset // 3_600_000] += 1
        capped_hours[offset // 3_600_000] += capped
    assert (a or {}).get("requests_eligible_by_hour", [0] * 24) == eligible
    assert (a or {}).get("capped_no_bids_by_hour", [0] * 24) == capped_hours


offers = st.lists(
    st.tuples(st.sampled_from(["a", "b", ""]), st.integers(1, 20_000_000), st.booleans()),
    max_size=6,
)


@given(st.lists(st.tuples(offers, st.integers(0, DAY_MS - 1)), max_size=20))
def test_counted_settlements_add_up_per_campaign(answers):
    outcomes, bids, wins, spend = CampaignOutcomes(), 0, 0, 0
    for bid_list, ts in answers:
        settlement = Settlement(
            bids=len(bid_list),
            wins=[
                Win("1", price / 1e6, price / 1e6, None, None, cid)
                for cid, price, won in bid_list
                if won
            ],
            offers=tuple(Offer(cid, price / 1e6) for cid, price, _ in bid_list),
        )
        outcomes.count(settlement, MIDNIGHT_MS + ts)
        bids += settlement.bids
        wins += len(settlement.wins)
        spend += sum(win.spend_micros for win in settlement.wins)
    figures = outcomes_json(outcomes).values()
    assert sum(c["bids"] for c in figures) == bids
    assert sum(c["wins"] for c in figures) == wins
    assert sum(c["spend_micros"] for c in figures) == sum(sum(c["spend_by_hour"]) for c in figures)
    assert sum(c["spend_micros"] for c in figures) == spend


@given(st.integers(0, DAY_MS - 1), st.integers(0, DAY_MS - 1))
def test_the_target_is_the_curves_share_of_the_span(a, b):
    outcomes = CampaignOutcomes(budgets_of([campaign("k1", 1_000_000_000)]))
    first, last = sorted((a, b))
    outcomes.see(MIDNIGHT_MS + last)
    outcomes.see(MIDNIGHT_MS + first)
    target = outcomes_json(outcomes)["k1"]["target_micros"]
    share = STANDARD.share_at(last / 1000) - STANDARD.share_at(first / 1000)
    assert target == pytest.approx(1_000_000_000 * share, abs=24)


def test_a_whole_day_targets_the_whole_budget():
    outcomes = CampaignOutcomes(budgets_of([campaign("k1", 5_000_000)]))
    outcomes.see(MIDNIGHT_MS)
    outcomes.see(MIDNIGHT_MS + DAY_MS - 1)
    assert outcomes_json(outcomes)["k1"]["target_micros"] == pytest.approx(5_000_000, abs=1)


def test_no_target_across_midnight_or_for_an_unknown_curve():
    outcomes = CampaignOutcomes(budgets_of([campaign("k1"), campaign("k2", curve="no-such")]))
    outcomes.see(MIDNIGHT_MS)
    assert outcomes_json(outcomes)["k2"]["target_micros"] is None
    outcomes.see(MIDNIGHT_MS + DAY_MS)
    assert outcomes_json(outcomes)["k1"]["target_micros"] is None
    assert outcomes_json(outcomes)["k1"]["daily_budget_micros"] == 1_000_000
