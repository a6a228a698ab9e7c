"""Spreading a stream across regions: every request once, SSPs kept whole, shares kept."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.stream import StreamRecord
from bidder.replay.spread import by_share, by_ssp, parse_shares

pytestmark = pytest.mark.pure

RECORDS = st.lists(
    st.builds(
        StreamRecord,
        t_ms=st.integers(0, 10**6),
        ts=st.integers(0, 10**12),
        ssp=st.sampled_from(["ssp-alpha", "ssp-beta", "ssp-gamma", "ssp-delta"]),
        body=st.just(b"{}"),
    ),
    max_size=60,
)


@given(RECORDS, st.sampled_from([("eu", "us"), ("ap", "eu", "us")]))
def test_by_ssp_sends_every_request_once_and_each_ssp_to_one_region(
    records: list[StreamRecord], regions: tuple[str, ...]
) -> None:
    parts = by_ssp(records, regions)
    assert sorted(map(id, itertools.chain(*parts.values()))) == sorted(map(id, records))
    regions_of_ssp = {r.ssp: {name for name, part in parts.items() if r in part} for r in records}
    assert all(len(found) == 1 for found in regions_of_ssp.values())


@given(RECORDS)
def test_by_share_keeps_the_stream_order_in_each_part(records: list[StreamRecord]) -> None:
    parts = by_share(records, {"eu": 1, "us": 3})
    for part in parts.values():
        positions = [next(i for i, r in enumerate(records) if r is p) for p in part]
        assert positions == sorted(positions)
    assert sum(map(len, parts.values())) == len(records)


def test_by_share_follows_the_shares() -> None:
    records = [StreamRecord(n, n, "ssp-alpha", b"{}") for n in range(20_000)]
    parts = by_share(records, {"eu": 0.25, "us": 0.75})
    assert 4_600 < len(parts["eu"]) < 5_400  # 5,000 +- 6 standard deviations


@pytest.mark.parametrize("text", ["eu", "eu=0", "eu=x", "eu=0.5,us=-1"])
def test_a_bad_share_is_named(text: str) -> None:
    with pytest.raises(ValueError, match="region share must be NAME=WEIGHT"):
        parse_shares(text)
