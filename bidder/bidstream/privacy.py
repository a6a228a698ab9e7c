"""Privacy signals: GDPR with TCF v2 consent, US privacy, GPP and COPPA.

A user's TCF choices are stable: a CMP stores them once and every request carries the
same string. ``User.consent_draw`` picks the choice: 72% accept all, 8% a custom choice
that still covers our vendor (``inventory.DSP_VENDOR_ID``) and our purposes, 10% a
custom choice that does not (our vendor left out, or purposes 3 and 4 refused), 10%
reject all; so ~80% of strings let us bid with a profile. Per TCF 2.2, Created and
LastUpdated carry the same value, rounded to the day.
"""

from __future__ import annotations

import base64
import functools
import random
from typing import Any

from bidder.bidstream import inventory as inv
from bidder.bidstream._draw import Auction
from bidder.bidstream.population import User
from bidder.openrtb.tcf import TcfConsent
from bidder.openrtb.tcf_encode import encode_tc_string

_GVL_MAX = 1150
_GVL_RNG = random.Random(1150)
GVL = frozenset({*_GVL_RNG.sample(range(1, _GVL_MAX + 1), 800), inv.DSP_VENDOR_ID})
"""The vendor ids of the simulated Global Vendor List (fixed)."""
GVL_LI = frozenset(_GVL_RNG.sample(sorted(GVL), 300))
ALL_PURPOSES = frozenset(range(1, 12))
LI_PURPOSES = frozenset({2, 7, 8, 9, 10, 11})
"""Purposes 3-6 may not rest on legitimate interest under TCF 2.2."""
_CMP_IDS = (10, 28, 31, 68, 134, 300, 371)
_DAY_DS = 86_400 * 10
_GARBAGE = ("0", "undefined", "null", "BOgarbage==", "CPXyz")


def consent_string(a: Auction, day_start_ds: int, rng: random.Random) -> str | None:
    """The user.consent value an EU request carries (None outside the EU or if missing)."""
    if a.consent is None or a.consent == "missing":
        return None
    real = user_tc_string(a.user, day_start_ds)
    if a.consent == "garbage":
        return rng.choice((*_GARBAGE, real[:24]))  # a truncated string is garbage too
    return real


@functools.lru_cache(maxsize=50_000)
def user_tc_string(user: User, day_start_ds: int) -> str:
    return encode_tc_string(user_tcf(user, day_start_ds))


def user_tcf(user: User, day_start_ds: int) -> TcfConsent:
    """This user's TCF choices as of ``day_start`` (deciseconds since the epoch)."""
    rng = random.Random(user.index)  # per-user and seed-independent, like the user
    days_ago = 1 + rng.randrange(380)
    updated = (day_start_ds // _DAY_DS - days_ago) * _DAY_DS
    purposes, vendors, li_vendors = _choices(user.consent_draw, rng)
    language = inv.LANGUAGE.get(user.country, "en").upper()
    return TcfConsent(
        created_ds=updated,
        last_updated_ds=updated,
        cmp_id=rng.choice(_CMP_IDS),
        cmp_version=rng.randint(1, 12),
        consent_screen=rng.randint(1, 3),
        consent_language=language,
        vendor_list_version=rng.randint(120, 160),
        tcf_policy_version=rng.choice((4, 5)),
        is_service_specific=True,
        use_non_standard_texts=False,
        special_feature_optins=frozenset({1}) if purposes == ALL_PURPOSES else frozenset(),
        purposes_consent=purposes,
        purposes_li=LI_PURPOSES,
        purpose_one_treatment=False,
        publisher_cc=inv.ALPHA2.get(user.country, "GB"),
        vendor_consents=vendors,
        vendor_li=li_vendors,
    )


def _choices(
    draw: float, rng: random.Random
) -> tuple[frozenset[int], frozenset[int], frozenset[int]]:
    """(purpose consents, vendor consents, vendor LI) for a user's consent draw."""
    if draw < 0.72:
        return ALL_PURPOSES, GVL, GVL_LI
    some = frozenset(rng.sample(sorted(GVL), 250))
    if draw < 0.80:
        extra = frozenset(rng.sample(range(5, 12), 3))
        return inv.DSP_PURPOSES | extra, some | {inv.DSP_VENDOR_ID}, GVL_LI
    if draw < 0.85:
        return ALL_PURPOSES, some - {inv.DSP_VENDOR_ID}, GVL_LI - {inv.DSP_VENDOR_ID}
    if draw < 0.90:
        return ALL_PURPOSES - {3, 4}, some | {inv.DSP_VENDOR_ID}, GVL_LI
    return frozenset(), frozenset(), GVL_LI


def grants_dsp(user: User) -> bool:
    """Whether this user's string gives our vendor consent for all our purposes."""
    return user.consent_draw < 0.80


def regs(a: Auction, ortb: str, rng: random.Random) -> dict[str, Any]:
    """The regs object in the SSP's OpenRTB shape (2.6 top level, 2.5 under ext)."""
    signals: dict[str, Any] = {"gdpr": 1 if a.consent is not None else 0}
    if a.us_privacy is not None:
        signals["us_privacy"] = a.us_privacy
    if a.gpp:
        signals["gpp"], signals["gpp_sid"] = _gpp(rng), [7]
    out: dict[str, Any] = signals if ortb == "2.6" else {"ext": signals}
    if a.coppa:
        out["coppa"] = 1
    return out


def _gpp(rng: random.Random) -> str:
    # Opaque to us: a GPP header plus one US-national section of plausible length.
    section = base64.urlsafe_b64encode(rng.randbytes(9)).decode("ascii")
    return f"DBABLA~{section}.QA"
