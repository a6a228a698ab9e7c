"""Cap rules: a campaign's caps compiled into the form both Lua scripts read. Pure.

A cap is (scope, window, limit). Each compiles to a ``Rule`` over one counter
identity, the rule's ``token``: 6 base64url characters of a BLAKE2b digest of
(scope, scope id, window), so field names stay short whatever the ids are. Two
campaigns of one advertiser with the same advertiser window share a token, so they
share a counter.

Windows. Every counting window is a run of buckets of ``size_ms``; bucket ``j``
covers ``[j * size, (j + 1) * size)`` of the caller's clock (epoch ms, UTC):

- fixed (hour/day/week/month): size = the window, ``reach`` 0; a check at ``now``
  reads bucket ``floor(now / size)`` only, so the count resets at each bucket edge.
- rolling (``rolling:<N>h``): size = window / 24 (``SUB_BUCKETS``), ``reach`` = the
  window; a check reads buckets ``floor((now - window) / size)`` to
  ``floor(now / size)``. That covers all of ``(now - window, now]`` plus at most one
  sub-bucket more in the past: counts are never lower than the exact rolling count
  (a cap is never exceeded) and an impression keeps counting for up to window/24
  longer than exact (the error bound).
- recency: the minimum gap; the counter is the instant the gap ends.

A bucket stops mattering at its *expiry* ``(j + 1) * size + reach``: the first
instant no check reads it. Field names carry that expiry (in minutes), so any
write can prune any stale field without knowing whose it is.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from bidder.core.campaigns import Campaign, FrequencyCap

SUB_BUCKETS = 24
"""Sub-buckets per rolling window: the error bound is window / 24."""
TOKEN_CHARS = 6
"""36 bits: a collision inside one user's hash (a few dozen tokens) is ~1e-8."""
USER_SCOPES = ("creative", "line_item", "campaign", "advertiser")
HOUSEHOLD_SCOPE = "household"
COUNT_EVENTS = ("win", "viewable")
"""Events on which count-on-win subjects are counted (``Subject.count_event``)."""
_COUNT_EVENT = {"delivered": "win", "viewable": "viewable"}


@dataclass(frozen=True, slots=True)
class Rule:
    """One cap over one counter, as the scripts see it."""

    token: str
    kind: str
    """'b' (buckets: fixed and rolling) or 't' (recency)."""
    size_ms: int
    """Bucket size; for recency, the minimum gap."""
    reach_ms: int
    """How far back a check reads: 0 for fixed, the window for rolling."""
    limit: int
    """Impressions allowed (recency: 1 per gap)."""

    @property
    def argv(self) -> tuple[str | int, ...]:
        return (self.kind, self.token, self.size_ms, self.reach_ms, self.limit)


@dataclass(frozen=True, slots=True, eq=False)
class Subject:
    """What one candidate (campaign + creative) is capped and counted by.

    Compares by identity: build subjects once per campaign version (``subject_for``
    caches them) and use them as keys.
    """

    campaign_id: str
    creative_id: str
    reserve: bool
    """count_on='bid': the check reserves a slot (strict)."""
    fail_closed: bool
    """on_store_error='closed': unknown counters mean no bid."""
    count_event: str | None
    """'win' or 'viewable': the event the win path counts on; None when reserving."""
    user_rules: tuple[Rule, ...]
    household_rules: tuple[Rule, ...]
    user_count_rules: tuple[Rule, ...]
    """user_rules plus the advertiser windows of sibling campaigns (write fan-out)."""
    cap_class: str = "standard"
    max_stale_ms: int = 0
    """From the cap class: how long a worker may act on a read that found it under its
    caps (the count cache, ``FrequencyCapper``); 0 reads on every request."""
    zero_room: int = 0
    """For a class that tolerates stale counts whose caps are all hour or day buckets:
    the smallest limit, the room of a person the counted bitmap shows was never counted
    today (``fcap.counted``); 0 when the bitmap cannot stand in for a read."""
    fallback: str = "none"
    """The campaign's ``cap_policy.fallback``: the coarser key its user caps count under
    when the request has no usable user key (the caller derives it)."""
    cache_id: int = field(default=0)
    """Stable within a process for the same campaign version; the negative cache key."""

    @property
    def has_caps(self) -> bool:
        return bool(self.user_rules or self.household_rules)


def compile_cap(cap: FrequencyCap, campaign: Campaign, creative_id: str) -> Rule:
    ident = {
        "creative": f"{campaign.id}/{creative_id}",
        "line_item": campaign.id,  # one implicit line item per campaign (docs/fcap.md)
        "campaign": campaign.id,
        "advertiser": campaign.advertiser,
        "household": campaign.id,
    }[cap.scope]
    window_ms = cap.window_s * 1000
    if cap.window_kind == "recency":
        return Rule(token(cap.scope, ident, "recency", cap.window_s), "t", window_ms, 0, 1)
    limit = cap.limit if cap.limit is not None else 0
    tok = token(cap.scope, ident, cap.window_kind, cap.window_s)
    if cap.window_kind == "rolling":
        return Rule(tok, "b", window_ms // SUB_BUCKETS, window_ms, limit)
    return Rule(tok, "b", window_ms, 0, limit)


def token(scope: str, ident: str, kind: str, window_s: int) -> str:
    digest = hashlib.blake2b(f"{scope}|{ident}|{kind}|{window_s}".encode(), digest_size=6)
    return base64.urlsafe_b64encode(digest.digest()).decode()[:TOKEN_CHARS]


def build_subjects(campaigns: Iterable[Campaign]) -> dict[tuple[str, str], Subject]:
    """Every (campaign id, creative id) subject of a campaign book; build once per refresh.

    An impression counts against every advertiser-scope window of its advertiser, also
    those only a sibling campaign caps on (write fan-out), so the book is built whole.
    """
    campaigns = list(campaigns)
    advertiser_caps: dict[str, set[FrequencyCap]] = {}
    for campaign in campaigns:
        for cap in campaign.frequency_caps:
            if cap.scope == "advertiser":
                advertiser_caps.setdefault(campaign.advertiser, set()).add(cap)
    return {
        (campaign.id, creative.id): subject_for(
            campaign, creative.id, advertiser_caps.get(campaign.advertiser, ())
        )
        for campaign in campaigns
        for creative in campaign.creatives
    }


def subject_for(
    campaign: Campaign, creative_id: str, advertiser_caps: Iterable[FrequencyCap] = ()
) -> Subject:
    """The subject of one campaign + creative.

    ``advertiser_caps``: advertiser-scope caps of the advertiser's other campaigns,
    counted (not checked) by this one; ``build_subjects`` finds them.
    """
    caps = campaign.frequency_caps
    user = tuple(compile_cap(c, campaign, creative_id) for c in caps if c.scope != HOUSEHOLD_SCOPE)
    house = tuple(compile_cap(c, campaign, creative_id) for c in caps if c.scope == HOUSEHOLD_SCOPE)
    seen = {rule.token for rule in user}
    extra = (compile_cap(cap, campaign, creative_id) for cap in advertiser_caps)
    user_count = user + tuple({r.token: r for r in extra if r.token not in seen}.values())
    policy = campaign.cap_policy
    reserve = policy.count_on == "bid"
    return Subject(
        campaign_id=campaign.id,
        creative_id=creative_id,
        reserve=reserve,
        fail_closed=policy.on_store_error == "closed",
        count_event=None if reserve else _COUNT_EVENT[policy.impressions],
        user_rules=user,
        household_rules=house,
        user_count_rules=user_count,
        cap_class=policy.cap_class,
        max_stale_ms=0 if reserve else policy.max_stale_s * 1000,
        zero_room=0 if reserve or not policy.max_stale_s else _zero_room(user + house),
        fallback=policy.fallback if user else "none",
        cache_id=hash((campaign.id, creative_id, user_count, house, reserve, policy.fallback)),
    )


_WITHIN_A_DAY = (3_600_000, 86_400_000)
"""Bucket sizes whose buckets each lie inside one UTC day (``fcap.counted``)."""


def _zero_room(rules: tuple[Rule, ...]) -> int:
    within = all(r.kind == "b" and not r.reach_ms and r.size_ms in _WITHIN_A_DAY for r in rules)
    return min(r.limit for r in rules) if rules and within else 0


def rules_argv(rules: tuple[Rule, ...]) -> tuple[str | int, ...]:
    return tuple(value for rule in rules for value in rule.argv)


# ---------------------------------------------------------------------- window math
# The check reads the fields named here and decides here; count.lua and release.lua
# name fields the same way in Lua (tests hold the two together).

_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def fields_at(rule: Rule, now_ms: int) -> tuple[str, ...]:
    """The hash fields a check at ``now_ms`` reads, oldest bucket first."""
    if rule.kind == "t":
        return (rule.token + "!",)
    first = (now_ms - rule.reach_ms) // rule.size_ms
    return _bucket_fields(rule.token, rule.size_ms, rule.reach_ms, first, now_ms // rule.size_ms)


@lru_cache(maxsize=8_192)
def _bucket_fields(token: str, size: int, reach: int, first: int, last: int) -> tuple[str, ...]:
    # Cached: the names change only at bucket edges, and checks run per request.
    return tuple(
        token + _b36(-(-((j + 1) * size + reach) // 60_000)) for j in range(first, last + 1)
    )


def _b36(n: int) -> str:
    text = ""
    while True:
        n, digit = divmod(n, 36)
        text = _DIGITS[digit] + text
        if n == 0:
            return text


def capped_until(rule: Rule, values: Sequence[bytes | int | None], now_ms: int) -> int:
    """0 when under the rule, else the instant it stops capping (absent releases).

    ``values``: what the check read for ``fields_at(rule, now_ms)``, in order.
    """
    if rule.kind == "t":
        free_at = int(values[0] or 0)
        return free_at if free_at > now_ms else 0
    total, oldest = 0, -1
    for k, value in enumerate(values):
        if value and int(value) > 0:
            total += int(value)
            oldest = k if oldest < 0 else oldest
    if total < rule.limit:
        return 0
    first = (now_ms - rule.reach_ms) // rule.size_ms
    return expiry_ms(rule, first + max(oldest, 0))


def bucket_of(rule: Rule, t_ms: int) -> int:
    return t_ms // rule.size_ms


def checked_buckets(rule: Rule, now_ms: int) -> range:
    """The buckets a check at ``now_ms`` sums."""
    return range((now_ms - rule.reach_ms) // rule.size_ms, now_ms // rule.size_ms + 1)


def expiry_ms(rule: Rule, bucket: int) -> int:
    """The first instant no check reads ``bucket``."""
    return (bucket + 1) * rule.size_ms + rule.reach_ms


def counts_at(rule: Rule, impression_ms: int, now_ms: int) -> bool:
    """Whether an impression at ``impression_ms`` counts for a check at ``now_ms``."""
    if rule.kind == "t":
        return now_ms < impression_ms + rule.size_ms
    return bucket_of(rule, impression_ms) in checked_buckets(rule, now_ms)


def capped_by(rule: Rule, impressions_ms: Iterable[int], now_ms: int) -> bool:
    """The model: whether ``rule`` caps at ``now_ms`` given impression instants."""
    return sum(counts_at(rule, t, now_ms) for t in impressions_ms) >= rule.limit
