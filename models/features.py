"""The one feature definition, shared by training and serving.

A row describes one candidate (imp, campaign, creative) of one request: request and
user columns first (the same for every candidate of a request, built once), then the
candidate's own. Every value is a float64; categorical columns hold small integer
codes from fixed vocabularies written here (0 = unknown or other), which LightGBM
splits on as categories. A missing number is NaN, which LightGBM treats as missing.

``FEATURE_VERSION`` names the definition; ``FINGERPRINT`` hashes it (names, kinds and
every vocabulary), so a change that forgot to bump the version is still caught: the
scorer refuses an artifact whose fingerprint differs from this module's. Anything that
changes what a column means (a vocabulary, a unit, the order) must change one of them,
and then the model must be retrained (``bidsim train``).

The hour of day comes from the injected clock's wall time (UTC), not the request.

Rows are packed: ``pack_rows`` writes them as row-major float64 bytes, the layout
LightGBM's C API reads (``models.scorer``), and ``build_rows`` is the same bytes as an
array for training. A creative's own columns (media, size, category, bucket) do not
depend on the request: ``creative_table`` computes them once per campaign refresh and
serving passes the table in; without it (training, a candidate from before a refresh)
they are computed on the spot by the same ``creative_columns``.
"""

from __future__ import annotations

import functools
import hashlib
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
import orjson

from bidder.core.campaigns import Campaign, Creative
from bidder.decide.eligibility import Candidate
from bidder.decide.profiles import Profile
from bidder.openrtb.view import BidRequest

FEATURE_VERSION = 1


class Feature(NamedTuple):
    name: str
    categorical: bool


FEATURES: tuple[Feature, ...] = (
    # request
    Feature("ssp", True),
    Feature("channel", True),
    Feature("devicetype", True),
    Feature("country", True),
    Feature("hour", False),
    Feature("n_imps", False),
    # user profile
    Feature("has_profile", False),
    Feature("n_segments", False),
    Feature("hours_since_click", False),
    Feature("clicks_30d", False),
    # candidate
    Feature("media", True),
    Feature("creative_w", False),
    Feature("creative_h", False),
    Feature("instl", False),
    Feature("floor_cpm", False),
    Feature("ad_category", True),
    Feature("segment_match", False),
    Feature("creative_bucket", True),
)
NAMES: tuple[str, ...] = tuple(f.name for f in FEATURES)
CATEGORICAL: tuple[int, ...] = tuple(i for i, f in enumerate(FEATURES) if f.categorical)
WIDTH = len(FEATURES)

# Vocabularies: position + 1 is the code; anything else is 0.
SSPS = ("ssp-alpha", "ssp-beta", "ssp-gamma", "ssp-delta")
CHANNELS = ("site", "app", "dooh")
COUNTRIES = ("USA", "GBR", "CAN", "DEU", "FRA", "BRA", "IND", "JPN", "AUS", "MEX", "ESP", "ITA")
MEDIA = ("banner", "video", "native", "audio")
MAX_DEVICETYPE = 8
CREATIVE_BUCKETS = 128
_HOUR_MS = 3_600_000


def definition() -> dict[str, object]:
    """Everything a column's meaning depends on: what ``FINGERPRINT`` hashes."""
    return {
        "version": FEATURE_VERSION,
        "features": [[f.name, f.categorical] for f in FEATURES],
        "ssps": SSPS,
        "channels": CHANNELS,
        "countries": COUNTRIES,
        "media": MEDIA,
        "max_devicetype": MAX_DEVICETYPE,
        "creative_buckets": CREATIVE_BUCKETS,
        "units": {"hour": "UTC from clock.wall_ms", "floor_cpm": "USD CPM", "hours": "3600 s"},
    }


def fingerprint(parts: Mapping[str, object]) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


FINGERPRINT = fingerprint(definition())

_SSP_CODE = {name: i + 1 for i, name in enumerate(SSPS)}
_CHANNEL_CODE = {name: i + 1 for i, name in enumerate(CHANNELS)}
_COUNTRY_CODE = {name: i + 1 for i, name in enumerate(COUNTRIES)}
_MEDIA_CODE = {name: i + 1 for i, name in enumerate(MEDIA)}
_NAN = math.nan


ROW_BYTES = WIDTH * 8
"""Bytes of one packed row (float64 columns)."""
_CANDIDATE_START = NAMES.index("media")
_HEAD = struct.Struct(f"{_CANDIDATE_START}d")  # the request and profile columns
_TAIL = struct.Struct(f"{WIDTH - _CANDIDATE_START}d")  # the candidate's columns


class CreativeColumns(NamedTuple):
    """A creative's columns that no request changes (codes as in ``FEATURES``)."""

    creative: Creative
    """The creative these were computed from: a candidate uses them only if it is the same."""
    media: int
    width: int
    height: int
    category: int
    bucket: int


CreativeTable = Mapping[tuple[str, str], CreativeColumns]
"""(campaign id, creative id) -> that creative's own columns."""
NO_TABLE: CreativeTable = MappingProxyType({})


def creative_columns(campaign: Campaign, creative: Creative) -> CreativeColumns:
    category = ad_category(creative.cat[0]) if creative.cat else 0
    return CreativeColumns(
        creative,
        _MEDIA_CODE.get(creative.format, 0),
        creative.w or 0,
        creative.h or 0,
        category,
        creative_bucket(campaign.id, creative.id),
    )


def creative_table(campaigns: Iterable[Campaign]) -> dict[tuple[str, str], CreativeColumns]:
    """Every creative's own columns, computed when the campaigns are loaded."""
    return {(c.id, cr.id): creative_columns(c, cr) for c in campaigns for cr in c.creatives}


def pack_rows(
    request: BidRequest,
    ssp: str,
    profile: Profile | None,
    candidates: Sequence[Candidate],
    now_ms: int,
    table: CreativeTable = NO_TABLE,
) -> bytes:
    """One row per candidate, packed: len(candidates) x ROW_BYTES, float64, row-major.

    ``table`` holds the creatives' own columns (``creative_table``); a candidate whose
    creative is not in it is computed on the spot, with the same result.
    """
    head = _HEAD.pack(*request_columns(request, ssp, now_ms), *profile_columns(profile, now_ms))
    segments = profile.segments if profile is not None else frozenset()
    rows: list[bytes] = []
    for candidate in candidates:
        rows += (head, candidate_columns(candidate, segments, table))
    return b"".join(rows)


def build_rows(
    request: BidRequest,
    ssp: str,
    profile: Profile | None,
    candidates: Sequence[Candidate],
    now_ms: int,
) -> np.ndarray:
    """``pack_rows`` as a read-only (len(candidates), WIDTH) float64 array, for training."""
    packed = pack_rows(request, ssp, profile, candidates, now_ms)
    return np.frombuffer(packed, dtype=np.float64).reshape(len(candidates), WIDTH)


def request_columns(request: BidRequest, ssp: str, now_ms: int) -> list[float]:
    devicetype = request.devicetype
    return [
        _SSP_CODE.get(ssp, 0),
        _CHANNEL_CODE.get(request.channel, 0),
        devicetype if devicetype is not None and 0 < devicetype <= MAX_DEVICETYPE else 0,
        _COUNTRY_CODE.get(request.country or "", 0),
        (now_ms // _HOUR_MS) % 24,
        len(request.imps),
    ]


def profile_columns(profile: Profile | None, now_ms: int) -> list[float]:
    if profile is None:
        return [0, 0, _NAN, 0]
    last = profile.last_click_ms
    hours = max(now_ms - last, 0) / _HOUR_MS if last is not None else _NAN
    return [1, len(profile.segments), hours, profile.clicks_30d]


def candidate_columns(
    candidate: Candidate, segments: frozenset[int], table: CreativeTable = NO_TABLE
) -> bytes:
    """The candidate's part of its row, packed."""
    creative, imp = candidate.creative, candidate.imp
    own = table.get((candidate.campaign.id, creative.id))
    if own is None or own.creative is not creative:  # not in the table, or from another refresh
        own = creative_columns(candidate.campaign, creative)
    return _TAIL.pack(
        own.media,
        own.width,
        own.height,
        1 if imp.instl else 0,
        imp.bidfloor_micros / 1_000_000,
        own.category,
        1 if own.category in segments else 0,
        own.bucket,
    )


@functools.lru_cache(maxsize=4096)
def ad_category(cat: str) -> int:
    """IAB tier-1 number of a category ('IAB13-7' -> 13); 0 when it is not one."""
    head = cat.split("-", 1)[0]
    digits = head[3:]
    return int(digits) if head[:3] == "IAB" and digits.isdigit() and int(digits) <= 26 else 0


@functools.lru_cache(maxsize=4096)
def creative_bucket(campaign_id: str, creative_id: str) -> int:
    """A stable bucket 1..CREATIVE_BUCKETS per creative (ids are open-ended strings)."""
    digest = hashlib.blake2b(f"{campaign_id}/{creative_id}".encode(), digest_size=4).digest()
    return 1 + int.from_bytes(digest, "big") % CREATIVE_BUCKETS
