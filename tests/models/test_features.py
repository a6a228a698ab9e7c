"""The shared feature definition: shape, encodings, and what the fingerprint covers."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.core.campaigns import Campaign
from bidder.decide.eligibility import CampaignIndex, Candidate, EligibilityPolicy, select
from bidder.decide.profiles import Profile
from bidder.openrtb.request import parse_bid_request
from models import features
from models.logs import Impression
from models.train import dataset
from tests.models.conftest import World

pytestmark = pytest.mark.pure

HOUR_MS = 3_600_000
REPO = Path(__file__).resolve().parents[2]


def _columns(row: np.ndarray) -> dict[str, float]:
    return dict(zip(features.NAMES, row.tolist(), strict=True))


def test_rows_have_one_float64_row_per_candidate(world: World) -> None:
    imp = world.impressions[0]
    rows = features.build_rows(imp.request, imp.ssp, imp.profile, [imp.candidate] * 3, imp.ts)
    assert rows.shape == (3, features.WIDTH)
    assert rows.dtype == np.float64 and rows.flags.c_contiguous


def test_packed_rows_are_the_rows_as_float64_bytes(world: World) -> None:
    imp = world.impressions[0]
    args = (imp.request, imp.ssp, imp.profile, [imp.candidate] * 2, imp.ts)
    packed = features.pack_rows(*args)
    assert len(packed) == 2 * features.ROW_BYTES
    assert packed == features.build_rows(*args).tobytes()


def test_a_known_candidate_gives_the_known_row(campaigns: list[Campaign]) -> None:
    request = parse_bid_request(
        orjson.dumps(
            {
                "id": "r",
                "imp": [{"id": "1", "bidfloor": 0.5, "instl": 1, "banner": {"w": 300, "h": 250}}],
                "site": {"domain": "x.example"},
                "device": {"devicetype": 4, "geo": {"country": "GBR"}},
            }
        )
    )
    campaign = next(c for c in campaigns if c.id == "brightleaf-remnant-mrec")
    creative = next(c for c in campaign.creatives if c.id == "bl-mrec-quote")  # IAB13-7
    now_ms = 1_767_225_600_000 + 13 * HOUR_MS + 5
    profile = Profile(frozenset({13, 2}), now_ms - 2 * HOUR_MS, 3)
    candidate = Candidate(request.imps[0], campaign, creative)
    row = features.build_rows(request, "ssp-beta", profile, [candidate], now_ms)[0]
    # The committed model was trained on exactly these codes and units.
    request_part, profile_part = [2, 1, 4, 2, 13, 1], [1, 2, 2.0, 3]
    candidate_part = [1, 300, 250, 1, 0.5, 13, 1, 72]
    assert row.tolist() == [*request_part, *profile_part, *candidate_part]


profiles = st.none() | st.builds(
    Profile,
    segments=st.frozensets(st.integers(0, 30), max_size=6),
    last_click_ms=st.none() | st.integers(1_700_000_000_000, 1_800_000_000_000),
    clicks_30d=st.integers(0, 500),
)


@settings(max_examples=150)
@given(data=st.data(), profile=profiles, now_ms=st.integers(0, 2**42))
def test_serving_rows_equal_the_training_rows(
    world: World, data: st.DataObject, profile: Profile | None, now_ms: int
) -> None:
    """What the model sees when serving (creatives' columns from the load-time table) is
    what ``bidsim train`` built its rows from, to the bit."""
    impression = data.draw(st.sampled_from(world.impressions))
    request = impression.request
    found = select(request, CampaignIndex(world.campaigns), EligibilityPolicy())
    assert isinstance(found, list)
    candidates = data.draw(st.lists(st.sampled_from(found), min_size=1, max_size=5))
    ssp = data.draw(st.sampled_from((*features.SSPS, "ssp-new", "")))
    table = features.creative_table(world.campaigns)
    served = features.pack_rows(request, ssp, profile, candidates, now_ms, table)
    shown = [dataclasses.replace(impression, ts=now_ms, ssp=ssp, candidate=c, profile=profile)
             for c in candidates]  # fmt: skip
    assert served == dataset(shown).x.tobytes()


def test_a_creative_changed_by_a_refresh_is_not_read_from_the_old_table(world: World) -> None:
    imp = next(i for i in world.impressions if i.candidate.creative.w)
    table = features.creative_table(world.campaigns)
    c = imp.candidate
    resized = dataclasses.replace(c.creative, w=(c.creative.w or 0) + 1)
    moved = Candidate(c.imp, c.campaign, resized)
    served = features.pack_rows(imp.request, imp.ssp, None, [moved], imp.ts, table)
    assert served == features.build_rows(imp.request, imp.ssp, None, [moved], imp.ts).tobytes()
    assert _columns(np.frombuffer(served))["creative_w"] == resized.w


def test_hour_comes_from_the_given_wall_time(world: World) -> None:
    imp = world.impressions[0]
    day = imp.ts - imp.ts % (24 * HOUR_MS)
    row = features.build_rows(imp.request, imp.ssp, None, [imp.candidate], day + 13 * HOUR_MS)[0]
    assert _columns(row)["hour"] == 13


def test_unknown_ssp_encodes_as_zero(world: World) -> None:
    imp = world.impressions[0]
    row = features.build_rows(imp.request, "ssp-new", None, [imp.candidate], imp.ts)[0]
    assert _columns(row)["ssp"] == 0


def test_no_profile_gives_missing_recency_and_zero_counts(world: World) -> None:
    imp = world.impressions[0]
    cols = _columns(features.build_rows(imp.request, imp.ssp, None, [imp.candidate], imp.ts)[0])
    assert cols["has_profile"] == 0 and cols["n_segments"] == 0 and cols["segment_match"] == 0
    assert math.isnan(cols["hours_since_click"])


def _with_category(world: World) -> Impression:
    return next(i for i in world.impressions if i.candidate.creative.cat)


def test_segment_match_is_set_when_the_ad_category_is_a_user_segment(world: World) -> None:
    imp = _with_category(world)
    category = features.ad_category(imp.candidate.creative.cat[0])
    profile = Profile(frozenset({category}), imp.ts - 2 * HOUR_MS, 3)
    cols = _columns(features.build_rows(imp.request, imp.ssp, profile, [imp.candidate], imp.ts)[0])
    assert cols["segment_match"] == 1
    assert cols["hours_since_click"] == 2.0 and cols["clicks_30d"] == 3


def test_categorical_columns_hold_small_non_negative_integers(world: World) -> None:
    x = world.data.x[:, list(features.CATEGORICAL)]
    assert np.all(x >= 0) and np.all(x == np.floor(x)) and np.all(x <= 128)


def test_the_committed_model_was_trained_on_this_definition() -> None:
    meta = orjson.loads((REPO / "models" / "artifact" / "ctr.json").read_bytes())
    assert meta["fingerprint"] == features.FINGERPRINT
    assert len(features.FINGERPRINT) == 16


@pytest.mark.parametrize(
    ("name", "key", "changed"),
    [
        ("FEATURE_VERSION", "version", "another"),
        ("SSPS", "ssps", ("ssp-other",)),
        ("CHANNELS", "channels", ("other",)),
        ("COUNTRIES", "countries", ("ZZZ",)),
        ("MEDIA", "media", ("other",)),
        ("MAX_DEVICETYPE", "max_devicetype", 99),
        ("CREATIVE_BUCKETS", "creative_buckets", 7),
    ],
)
def test_the_fingerprint_changes_with_any_part_of_the_definition(
    name: str, key: str, changed: object
) -> None:
    parts = features.definition()
    assert parts[key] == getattr(features, name)
    assert features.fingerprint({**parts, key: changed}) != features.FINGERPRINT


@given(st.integers(1, 26), st.integers(1, 99))
def test_ad_category_reads_the_tier1_number(tier1: int, sub: int) -> None:
    assert features.ad_category(f"IAB{tier1}-{sub}") == tier1
    assert features.ad_category(f"IAB{tier1}") == tier1


@given(st.text(max_size=12))
def test_ad_category_of_anything_else_is_a_valid_code(text: str) -> None:
    assert 0 <= features.ad_category(text) <= 26


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_creative_bucket_is_within_its_vocabulary(campaign: str, creative: str) -> None:
    assert 1 <= features.creative_bucket(campaign, creative) <= features.CREATIVE_BUCKETS
