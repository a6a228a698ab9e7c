"""The campaign trace header: what it says reads back, and capped means every candidate."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.pipeline.campaign_trace import CampaignTrace, capped_campaigns, parse_header

pytestmark = pytest.mark.pure

ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
ratios = st.floats(0.0, 1.0)


@given(st.lists(ids, unique=True), st.lists(ids, unique=True), st.lists(st.tuples(ids, ratios)))
def test_the_header_reads_back_what_it_says(
    eligible: list[str], capped: list[str], shading: list[tuple[str, float]]
) -> None:
    trace = CampaignTrace(eligible=tuple(eligible), capped=tuple(capped), shading=list(shading))
    figures = parse_header(trace.header())
    assert figures.eligible == tuple(eligible)
    assert figures.capped == tuple(capped)
    assert [cid for cid, _ in figures.shading] == [cid for cid, _ in shading]
    for (_, read), (_, said) in zip(figures.shading, shading, strict=True):
        assert abs(read - said) <= 0.00005


@given(st.dictionaries(st.tuples(ids, st.text(min_size=1, max_size=12)), st.integers(1, 10**9)))
def test_the_priced_campaigns_read_back_whatever_their_imp_ids_hold(
    priced: dict[tuple[str, str], int],
) -> None:
    figures = parse_header(CampaignTrace(priced=priced).header())
    assert {(cid, imp): price for cid, imp, price in figures.priced} == priced
    assert len(figures.priced) == len(priced)


@given(st.text(max_size=80))
def test_any_header_parses_to_figures_or_nothing(value: str) -> None:
    figures = parse_header(value)
    assert all(isinstance(ratio, float) for _, ratio in figures.shading)
    assert all(isinstance(price, int) and price >= 0 for _, _, price in figures.priced)


@given(st.lists(st.sampled_from("abcde")), st.lists(st.sampled_from("abcde")))
def test_a_campaign_is_capped_only_when_none_of_its_candidates_is_left(
    over_cap: list[str], allowed: list[str]
) -> None:
    capped = capped_campaigns(over_cap, allowed)
    assert set(capped) == set(over_cap) - set(allowed)
    assert len(capped) == len(set(capped))
