"""Requests without any id through the whole stack, campaigns without and with a
household fallback (docs/fcap.md, "Fallback keys"): with it, the anonymous faces of
fail-open campaigns are capped under their household instead of bid on unchecked."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bidder.chaos.identity_caps import FALLBACK_RUNS, Plan, measure
from bidder.stack.local import LocalStack

REQUESTS = 1_500
"""Half of ``Plan``'s stream: a heavy person still sends ~37 requests against the day cap
of 2, so every cap is met within a person's first few requests and the passes judged
here (at the cap, bids in flight) are the same; the stream's rate is unchanged."""

pytestmark = pytest.mark.long(20)


@pytest.fixture(scope="module")
def figures(aws_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    def private() -> LocalStack:
        return LocalStack(aws_endpoint=aws_endpoint)

    workdir = tmp_path_factory.mktemp("fallback-caps")
    plan = Plan(anonymous_share=0.3, requests=REQUESTS)
    return asyncio.run(measure(private, aws_endpoint, Path(workdir), plan, FALLBACK_RUNS))


def test_with_a_fallback_anonymous_requests_are_checked_under_their_household(
    figures: dict[str, Any],
) -> None:
    none, household = figures["fallback_none"], figures["fallback_household"]
    assert none["fallback_checks"] == 0 and household["fallback_checks"] > 0, figures
    assert household["unchecked_wins"] < none["unchecked_wins"], figures


def test_a_household_fallback_holds_standard_caps_but_for_bids_in_flight(
    figures: dict[str, Any],
) -> None:
    household = figures["fallback_household"]
    standard = household["classes"]["standard"]
    assert standard["over_cap_people_beyond_in_flight"] <= household["check_errors"], figures


def test_without_a_fallback_anonymous_households_pass_standard_caps(
    figures: dict[str, Any],
) -> None:
    none, household = figures["fallback_none"], figures["fallback_household"]
    above = [run["classes"]["standard"]["impressions_above_cap"] for run in (none, household)]
    assert above[0] > above[1], figures
