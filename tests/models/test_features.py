"""The shared feature definition: shape, encodings, and what the fingerprint covers."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from bidder.profiles import Profile
from models import features
from models.logs import Impression
from tests.models.conftest import World

HOUR_MS = 3_600_000


def _columns(row: np.ndarray) -> dict[str, float]:
    return dict(zip(features.NAMES, row.tolist(), strict=True))


def test_rows_have_one_float64_row_per_candidate(world: World) -> None:
    imp = world.impressions[0]
    rows = features.build_rows(imp.request, imp.ssp, imp.profile, [imp.candidate] * 3, imp.ts)
    assert rows.shape == (3, features.WIDTH)
    assert rows.dtype == np.float64 and rows.flags.c_contiguous


def test_rows_fill_a_preallocated_buffer_in_place(world: World) -> None:
    imp = world.impressions[0]
    buffer = np.zeros((8, features.WIDTH))
    rows = features.build_rows(imp.request, imp.ssp, imp.profile, [imp.candidate], imp.ts, buffer)
    assert np.shares_memory(rows, buffer)
    assert np.array_equal(buffer[0], rows[0])


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


def test_fingerprint_is_a_hash_of_the_definition() -> None:
    assert features._fingerprint() == features.FINGERPRINT
    assert len(features.FINGERPRINT) == 16


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
