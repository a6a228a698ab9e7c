"""Builders shared by the fcap tests."""

from __future__ import annotations

import asyncio
import uuid

from bidder.core.campaigns import Campaign, CapPolicy, Creative, FrequencyCap
from fcap.rules import Subject, subject_for

T0 = 1_767_225_600_000
"""2026-01-01T00:00:00Z, a UTC day and hour edge."""
HOUR_S = 3_600
DAY_S = 86_400
DEFAULT_POLICY = CapPolicy()


def campaign(
    *caps: FrequencyCap,
    cid: str = "c1",
    advertiser: str = "adv",
    policy: CapPolicy = DEFAULT_POLICY,
    creatives: tuple[str, ...] = ("cr1",),
) -> Campaign:
    return Campaign(
        id=cid,
        advertiser=advertiser,
        daily_budget_micros=1_000_000,
        base_bid_cpm_micros=1_000_000,
        max_bid_cpm_micros=2_000_000,
        creatives=tuple(
            Creative(id=c, format="banner", markup="<b/>", adomain=("a.com",), w=300, h=250)
            for c in creatives
        ),
        frequency_caps=caps,
        cap_policy=policy,
    )


def cap(scope: str, kind: str, window_s: int, limit: int | None = None) -> FrequencyCap:
    return FrequencyCap(scope=scope, window_kind=kind, window_s=window_s, limit=limit)


def one_subject(
    *caps: FrequencyCap, policy: CapPolicy = DEFAULT_POLICY, cid: str = "c1"
) -> Subject:
    return subject_for(campaign(*caps, cid=cid, policy=policy), "cr1")


def new_user() -> str:
    """A key no other test uses: tests share the session's Valkey and never flush it."""
    return f"b:test-{uuid.uuid4().hex}"


def far_deadline() -> float:
    return asyncio.get_running_loop().time() + 5.0
