"""``cap_policy.fallback`` in campaign documents: parsed, validated, warned, round-tripped."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bidder.cli import main
from bidder.core.campaign_docs import campaign_to_doc, campaigns_from_docs
from bidder.core.campaign_warnings import never_in_effect
from bidder.core.campaigns import CAP_FALLBACKS, CampaignError, CapPolicy
from tests.bidder.core.test_campaigns import _doc
from tests.bidder.live import CAMPAIGNS
from tests.fcap.support import DAY_S, campaign, cap


@pytest.mark.parametrize("fallback", CAP_FALLBACKS)
def test_a_fallback_is_read_and_round_trips(fallback: str) -> None:
    [parsed] = campaigns_from_docs([_doc(cap_policy={"class": "tight", "fallback": fallback})])
    assert (parsed.cap_policy.fallback, parsed.cap_policy.cap_class) == (fallback, "tight")
    assert campaigns_from_docs([campaign_to_doc(parsed)]) == [parsed]


def test_without_a_fallback_the_policy_has_none() -> None:
    [parsed] = campaigns_from_docs([_doc(cap_policy={"class": "loose"})])
    assert parsed.cap_policy.fallback == "none"


def test_an_unknown_fallback_is_named_with_the_choices() -> None:
    with pytest.raises(CampaignError) as err:
        campaigns_from_docs([_doc(cap_policy={"fallback": "cookie"})])
    assert err.value.problems[0].endswith(
        "cap_policy.fallback: must be one of 'none', 'household', 'ip' (got 'cookie')"
    )


def test_campaigns_check_names_the_file_and_the_bad_fallback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = orjson.loads(CAMPAIGNS.read_bytes())
    doc["campaigns"][0]["cap_policy"] = {"fallback": 24}
    path = tmp_path / "campaigns.json"
    path.write_bytes(orjson.dumps(doc))
    assert main(["campaigns", "check", str(path)]) != 0
    err = capsys.readouterr().err
    assert str(path) in err and "cap_policy.fallback: must be a non-empty string" in err
    assert "Traceback" not in err


def test_a_fallback_on_household_caps_only_is_warned() -> None:
    household = cap("household", "fixed", DAY_S, 3)
    policy = CapPolicy(fallback="ip")
    assert never_in_effect([campaign(household, policy=policy)]) == [
        "campaign c1: cap_policy.fallback 'ip' has no effect: the campaign has household"
        " caps only, which never use a user key"
    ]
    assert never_in_effect([campaign(cap("campaign", "fixed", DAY_S, 3), policy=policy)]) == []


def test_a_fallback_without_caps_is_warned() -> None:
    assert never_in_effect([campaign(policy=CapPolicy(fallback="household"))]) == [
        "campaign c1: cap_policy.fallback is set but the campaign has no frequency_caps"
    ]
