"""What a loose cap saves and what it costs, on a stream of people who come back
(docs/fcap.md, "Reads by class, measured"): the same stream replayed once with a loose
campaign alone and once with a strict one, both with a day cap of 20."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bidder.chaos.identity_caps import CLASS_RUNS, WORKERS, Plan, measure
from bidder.stack.local import LocalStack

pytestmark = pytest.mark.long(30)

PLAN = Plan(heavy_share=0.9, limit=20)
IN_FLIGHT = 3
"""Bids of one person in flight when a worker reads again (duplicate auctions: 2-3)."""


@pytest.fixture(scope="module")
def figures(aws_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    def private() -> LocalStack:
        return LocalStack(aws_endpoint=aws_endpoint)

    workdir = tmp_path_factory.mktemp("loose-reads")
    runs = {name: CLASS_RUNS[name] for name in ("loose", "strict")}
    return asyncio.run(measure(private, aws_endpoint, Path(workdir), PLAN, runs))


def test_loose_costs_at_least_5x_fewer_cap_reads_than_strict(figures: dict[str, Any]) -> None:
    loose = figures["loose"]["cap_reads"]["loose"]
    strict = figures["strict"]["cap_reads"]["strict"]
    assert 0 < loose * 5 <= strict, figures


def test_loose_passes_a_cap_by_at_most_one_bid_per_other_worker_and_bids_in_flight(
    figures: dict[str, Any],
) -> None:
    most = figures["loose"]["classes"]["loose"]["most_above_cap_one_person"]
    assert most <= WORKERS - 1 + IN_FLIGHT, figures


def test_strict_holds_its_cap_but_for_failed_checks(figures: dict[str, Any]) -> None:
    strict = figures["strict"]
    assert strict["classes"]["strict"]["over_cap_people"] <= strict["check_errors"], figures
