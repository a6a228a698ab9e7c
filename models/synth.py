"""The synthetic world's ground truth: who has a profile, and who clicks.

Generated logs need a click response the model can learn and we can check, so it is
written down here, as a function of the raw request, creative, profile and hour, and
never of ``models.features`` (the model must find the signal, not be handed it).

Profiles are a pure function of the user key (BLAKE2b of the key, one draw per
attribute), so the labelled-log generator and ``bidsim profiles load`` agree on every
user without sharing state: 80% of keys have a profile, with 0-4 interest segments
(IAB tier-1 numbers), maybe a recent ad click and a 30-day click count. Ages are
relative to ``now_ms``: a profile loaded now says "last click 30 h ago" now.

Click model (logistic; about 5% of impressions click on the bundled campaigns)::

    z = -3.9 + media + instl + size + device + app + hour + creative quality
        + profile: 0.1 + 1.4 if the ad's category is one of the user's segments
                   + 1.2 exp(-hours since last click / 24) + 0.15 min(clicks_30d, 6)
        - 0.25 outside the USA, Canada and the UK
"""

from __future__ import annotations

import hashlib
import math

from bidder.core.campaigns import Creative
from bidder.decide.profiles import Profile
from bidder.openrtb.view import BidRequest, Imp

KNOWN_SHARE = 0.8
SEGMENTS = (1, 2, 8, 9, 10, 13, 17, 18, 19, 20)
"""IAB tier-1 interests the synthetic data provider knows about."""
_SEGMENT_COUNTS = ((0, 0.15), (1, 0.35), (2, 0.30), (3, 0.15), (4, 0.05))
_HOUR_MS = 3_600_000

BASE = -3.9
MEDIA = {"banner": 0.0, "video": 0.5, "native": 0.35, "audio": -0.4}
SIZE = {(320, 50): -0.4, (728, 90): -0.2, (300, 600): 0.2, (970, 250): 0.2, (320, 480): 0.3}
DEVICE = {4: 0.2, 5: 0.1, 2: 0.0, 3: -0.6, 7: -0.6}
EVENING, NIGHT = range(18, 23), range(0, 6)
_HOME_MARKETS = frozenset({"USA", "CAN", "GBR"})


def synth_profile(user_key: str, now_ms: int) -> Profile | None:
    """The profile of ``user_key`` as of ``now_ms``; None for the 20% without one."""
    if _uniform(user_key, b"known") >= KNOWN_SHARE:
        return None
    count = _pick_count(_uniform(user_key, b"nseg"))
    order = sorted(SEGMENTS, key=lambda s: _uniform(user_key, b"seg%d" % s))
    clicked = _uniform(user_key, b"clicked") < 0.45
    age_h = min(-math.log1p(-_uniform(user_key, b"age")) * 72.0, 720.0)
    clicks = 1 + int(-math.log1p(-_uniform(user_key, b"clicks")) * 1.5) if clicked else 0
    return Profile(
        segments=frozenset(order[:count]),
        last_click_ms=now_ms - int(age_h * _HOUR_MS) if clicked else None,
        clicks_30d=clicks,
    )


def click_probability(
    request: BidRequest,
    imp: Imp,
    creative: Creative,
    profile: Profile | None,
    now_ms: int,
) -> float:
    """P(click) of showing ``creative`` in ``imp`` to this user at ``now_ms`` (the truth)."""
    z = BASE + MEDIA.get(creative.format, 0.0) + (0.6 if imp.instl else 0.0)
    z += SIZE.get((creative.w or 0, creative.h or 0), 0.0)
    z += DEVICE.get(request.devicetype or 0, 0.0)
    z += 0.25 if request.channel == "app" else 0.0
    hour = (now_ms // _HOUR_MS) % 24
    z += 0.3 if hour in EVENING else -0.35 if hour in NIGHT else 0.0
    z += 1.0 * (_uniform(creative.id, b"quality") - 0.5)
    z -= 0.0 if request.country in _HOME_MARKETS else 0.25
    if profile is not None:
        z += 0.1 + profile_lift(profile, ad_category(creative), now_ms)
    return 1.0 / (1.0 + math.exp(-z))


def profile_lift(profile: Profile, category: int, now_ms: int) -> float:
    lift = 1.4 if category in profile.segments else 0.0
    if profile.last_click_ms is not None:
        hours = max(now_ms - profile.last_click_ms, 0) / _HOUR_MS
        lift += 1.2 * math.exp(-hours / 24.0)
    return lift + 0.15 * min(profile.clicks_30d, 6)


def ad_category(creative: Creative) -> int:
    """IAB tier-1 number of the creative's first category ('IAB13-7' -> 13); 0 if none."""
    if not creative.cat:
        return 0
    head = creative.cat[0].split("-", 1)[0]
    return int(head[3:]) if head[3:].isdigit() else 0


def _pick_count(u: float) -> int:
    for count, share in _SEGMENT_COUNTS:
        if u < share:
            return count
        u -= share
    return _SEGMENT_COUNTS[-1][0]


def _uniform(text: str, what: bytes) -> float:
    digest = hashlib.blake2b(text.encode(), digest_size=8, person=what[:16]).digest()
    return int.from_bytes(digest, "big") / float(1 << 64)
