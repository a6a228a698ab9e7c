"""The replay report's duplicate-auctions section, and the generator's duplicate share."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from bidder.bidstream.generator import MALFORMED_SHARE, generate
from bidder.replay._duplicates import DuplicateTally
from bidder.replay.report import ReplayResult, render_table, to_json
from bidder.supply.path import PathPolicy

NODE = {"asi": "a.example", "sid": "p"}


def body(tid: str | None, hops: int = 1) -> bytes:
    source: dict[str, Any] = {"schain": {"complete": 1, "nodes": [NODE] * hops}}
    if tid is not None:
        source["tid"] = tid
    return orjson.dumps({"id": "r", "imp": [{"id": "1"}], "source": source})


DUP = "duplicate_auction"


def test_an_auction_sent_through_several_ssps_is_one_group() -> None:
    tally = DuplicateTally()
    for ssp in ("ssp-a", "ssp-b", "ssp-c"):
        tally.count(ssp, body("t1"), 204, "floor")
    tally.count("ssp-a", body("t2"), 204, "floor")
    summary = tally.summary()
    assert (summary.groups, summary.copies, summary.groups_with_bid) == (1, 3, 0)


def test_a_group_bid_twice_is_counted_as_bid_more_than_once() -> None:
    tally = DuplicateTally()
    tally.count("ssp-a", body("t1"), 200, None)
    tally.count("ssp-b", body("t1"), 200, None)
    summary = tally.summary()
    assert (summary.groups_bid_once, summary.groups_bid_more_than_once) == (0, 1)


def test_a_bid_on_the_best_path_among_the_copies_that_would_bid() -> None:
    tally = DuplicateTally()
    tally.count("ssp-a", body("t1", hops=1), 204, "floor")  # best path, but would not bid
    tally.count("ssp-b", body("t1", hops=2), 200, None)
    tally.count("ssp-c", body("t1", hops=3), 204, DUP)
    summary = tally.summary()
    assert summary.groups_bid_once == summary.groups_bid_on_best_bidding_copy == 1
    assert summary.groups_bid_on_best_copy == 0


def test_a_bid_on_a_worse_path_than_a_refused_duplicate_is_not_on_the_best_path() -> None:
    tally = DuplicateTally()
    tally.count("ssp-a", body("t1", hops=3), 200, None)
    tally.count("ssp-b", body("t1", hops=1), 204, DUP)
    assert tally.summary().groups_bid_on_best_bidding_copy == 0


def test_the_rank_follows_the_configured_preference() -> None:
    tally = DuplicateTally(PathPolicy(["ssp-b"]))
    tally.count("ssp-a", body("t1", hops=1), 204, DUP)
    tally.count("ssp-b", body("t1", hops=3), 200, None)
    assert tally.summary().groups_bid_on_best_bidding_copy == 1


def test_requests_without_a_tid_and_bad_bodies_are_counted_apart() -> None:
    tally = DuplicateTally()
    tally.count("ssp-a", body(None), 204, "floor")
    tally.count("ssp-a", b'{"source": {"tid": ', 204, "invalid")
    tally.count("ssp-a", body("x" * 129), 204, "floor")
    summary = tally.summary()
    assert (summary.requests_without_tid, summary.groups) == (3, 0)


def test_duplicate_answers_are_counted() -> None:
    tally = DuplicateTally()
    tally.count("ssp-a", body("t1"), 200, None)
    tally.count("ssp-b", body("t1"), 204, DUP)
    assert tally.summary().duplicate_answers == 1


def test_groups_folded_to_bound_memory_still_count() -> None:
    tally = DuplicateTally(max_open=2)
    for n in range(10):
        tally.count("ssp-a", body(f"t{n}"), 200, None)
        tally.count("ssp-b", body(f"t{n}"), 204, DUP)
    summary = tally.summary()
    assert (summary.groups, summary.groups_bid_once) == (10, 10)


def test_the_json_report_has_the_section_and_the_bids_latency() -> None:
    result = ReplayResult(deadline_ms=8.0)
    result.count_copy("ssp-a", body("t1"), 200, None, 3_000)
    result.count_copy("ssp-b", body("t1"), 204, DUP, 1_000)
    report = orjson.loads(orjson.dumps(to_json(result)))
    assert report["duplicate_auctions"]["groups_bid_once"] == 1
    assert report["duplicate_auctions"]["duplicate_answers"] == 1
    assert report["latency_ms"]["corrected_200"]["p99"] == pytest.approx(3.0, rel=0.01)


def test_held_bids_are_reported_apart_from_the_rest() -> None:
    result = ReplayResult(deadline_ms=8.0)
    result.count_copy("ssp-a", body("t1"), 200, None, 3_500, held=True)
    result.count_copy("ssp-b", body("t2"), 200, None, 500)
    result.count_copy("ssp-c", body("t3"), 200, None, 700)
    report = orjson.loads(orjson.dumps(to_json(result)))
    assert report["bids_held"] == 1
    latency = report["latency_ms"]
    assert latency["corrected_200_held"]["p99"] == pytest.approx(3.5, rel=0.01)
    assert latency["corrected_200_not_held"]["p99"] == pytest.approx(0.7, rel=0.01)
    assert latency["corrected_200"]["p99"] == pytest.approx(3.5, rel=0.01)
    assert "held 1  p50 3.50" in render_table(result)


def test_the_table_shows_the_section() -> None:
    result = ReplayResult(deadline_ms=8.0)
    result.count_copy("ssp-a", body("t1"), 200, None, 3_000)
    result.count_copy("ssp-b", body("t1"), 204, DUP, 1_000)
    assert "duplicate auctions  1 groups (2 requests)" in render_table(result)


# -- the generator's duplicate share ---------------------------------------------------------


def _groups(path: Path) -> dict[str, list[tuple[int, str]]]:
    """tid -> (t_ms, ssp) of its requests."""
    groups: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        if "request" in record:  # malformed bodies ("raw") carry no usable tid
            groups[record["request"]["source"]["tid"]].append((record["t_ms"], record["ssp"]))
    return groups


def test_a_duplicate_heavy_stream_sends_auctions_through_distinct_ssps(tmp_path: Path) -> None:
    summary = generate(tmp_path / "s.jsonl", 600, seed=4, duplicate_share=0.6)
    groups = [g for g in _groups(tmp_path / "s.jsonl").values() if len(g) > 1]
    assert len(groups) == summary.duplicate_groups
    assert summary.duplicate_groups / summary.auctions > 0.45
    for group in groups:
        assert len({ssp for _, ssp in group}) == len(group) <= 3
        assert max(t for t, _ in group) - min(t for t, _ in group) <= 4


def test_no_duplicate_share_means_no_groups(tmp_path: Path) -> None:
    assert generate(tmp_path / "s.jsonl", 300, seed=4, duplicate_share=0.0).duplicate_groups == 0


@pytest.mark.parametrize("share", [-0.1, 1.0 - MALFORMED_SHARE + 0.01])
def test_a_duplicate_share_out_of_range_is_refused(tmp_path: Path, share: float) -> None:
    with pytest.raises(ValueError, match="duplicate_share"):
        generate(tmp_path / "s.jsonl", 10, seed=1, duplicate_share=share)
