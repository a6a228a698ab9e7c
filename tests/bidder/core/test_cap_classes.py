"""Cap classes in campaign documents: a named class, the old flags mapped onto one."""

from __future__ import annotations

from typing import Any

import pytest

from bidder.core.campaign_docs import campaign_to_doc, campaigns_from_docs
from bidder.core.campaigns import CAP_CLASSES, CampaignError, CapPolicy
from tests.bidder.core.test_campaigns import _doc


def _policy(cap_policy: dict[str, Any]) -> CapPolicy:
    [campaign] = campaigns_from_docs([_doc(cap_policy=cap_policy)])
    return campaign.cap_policy


@pytest.mark.parametrize(
    ("name", "stale_s", "on_error", "count_on"),
    [
        ("loose", 30, "open", "win"),
        ("standard", 0, "open", "win"),
        ("tight", 0, "closed", "win"),
        ("strict", 0, "closed", "bid"),
    ],
)
def test_a_class_sets_staleness_failure_behaviour_and_reservation(
    name: str, stale_s: int, on_error: str, count_on: str
) -> None:
    policy = _policy({"class": name})
    assert (policy.cap_class, policy.max_stale_s, policy.on_store_error, policy.count_on) == (
        name,
        stale_s,
        on_error,
        count_on,
    )


@pytest.mark.parametrize(
    ("flags", "name"),
    [
        ({}, "standard"),
        ({"on_store_error": "open"}, "standard"),
        ({"on_store_error": "closed"}, "tight"),
        ({"count_on": "bid", "on_store_error": "closed"}, "strict"),
        ({"impressions": "viewable"}, "standard"),
    ],
)
def test_the_old_flags_map_onto_a_class(flags: dict[str, str], name: str) -> None:
    assert _policy(flags) == CapPolicy.of_class(name, flags.get("impressions", "delivered"))


def test_a_flag_given_with_a_class_overrides_that_part_of_it() -> None:
    policy = _policy({"class": "strict", "on_store_error": "open"})
    assert (policy.cap_class, policy.count_on, policy.on_store_error) == ("strict", "bid", "open")


def test_reserve_at_bid_alone_is_strict_and_keeps_failing_open() -> None:
    policy = _policy({"count_on": "bid"})
    assert (policy.cap_class, policy.on_store_error) == ("strict", "open")


def test_an_unknown_class_is_named_with_the_choices() -> None:
    with pytest.raises(CampaignError) as err:
        _policy({"class": "lax"})
    assert err.value.problems[0].endswith(
        "cap_policy.class: must be one of 'loose', 'standard', 'tight', 'strict' (got 'lax')"
    )


@pytest.mark.parametrize("name", sorted(CAP_CLASSES))
def test_a_class_round_trips_through_the_normal_form(name: str) -> None:
    [campaign] = campaigns_from_docs([_doc(cap_policy={"class": name})])
    assert campaigns_from_docs([campaign_to_doc(campaign)]) == [campaign]
