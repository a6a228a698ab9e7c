"""Campaign settings that can never take effect are warned about (``campaigns check``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from bidder.cli import main
from bidder.core.campaign_warnings import never_in_effect
from bidder.core.campaigns import CapPolicy
from tests.bidder.live import CAMPAIGNS
from tests.fcap.support import DAY_S, campaign, cap

DAILY = cap("campaign", "fixed", DAY_S, 3)


def test_a_viewable_count_with_reserve_at_bid_is_warned() -> None:
    reserving = campaign(DAILY, policy=CapPolicy(count_on="bid", impressions="viewable"))
    [warning] = never_in_effect([reserving])
    assert warning.startswith("campaign c1: cap_policy.impressions 'viewable'")
    assert "count_on 'bid'" in warning


def test_a_cap_policy_without_caps_is_warned_per_setting() -> None:
    policy = CapPolicy(on_store_error="closed", impressions="viewable")
    assert never_in_effect([campaign(policy=policy)]) == [
        "campaign c1: cap_policy.on_store_error is set but the campaign has no frequency_caps",
        "campaign c1: cap_policy.impressions is set but the campaign has no frequency_caps",
    ]


def test_viewable_caps_on_audio_only_are_warned() -> None:
    base = campaign(DAILY, policy=CapPolicy(impressions="viewable"))
    audio = dataclasses.replace(
        base, creatives=tuple(dataclasses.replace(c, format="audio") for c in base.creatives)
    )
    assert "audio is never viewable" in never_in_effect([audio])[0]


def test_settings_that_take_effect_are_not_warned() -> None:
    assert never_in_effect([campaign(DAILY, policy=CapPolicy(impressions="viewable"))]) == []
    assert never_in_effect([campaign()]) == []


def test_campaigns_check_prints_the_warnings_and_still_passes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = orjson.loads(CAMPAIGNS.read_bytes())
    first = doc["campaigns"][0]
    first["frequency_caps"] = [{"scope": "campaign", "window": "day", "limit": 2}]
    first["cap_policy"] = {"count_on": "bid", "impressions": "viewable"}
    path = tmp_path / "campaigns.json"
    path.write_bytes(orjson.dumps(doc))
    assert main(["campaigns", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: warning: campaign {first['id']}: cap_policy.impressions 'viewable'" in out
    assert out.rstrip().endswith("all valid, 1 warning")
