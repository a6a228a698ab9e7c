"""Which user key each candidate's caps are checked under, with fallback keys. Pure.

A request without a user key (or whose key the identity graph knows with too little
confidence) is checked per campaign policy (``cap_policy.fallback``): a campaign with
a fallback checks and counts its user caps under the household or network key
(``bidder.decide.identity.fallback_key``); one without keeps the request's own key
(None: its caps are unknown and ``on_store_error`` decides). Each fallback kind is
derived at most once per request, and only for a request that needs one.
"""

from __future__ import annotations

from collections.abc import Sequence

from bidder.decide.identity import fallback_key
from bidder.openrtb.view import BidRequest
from fcap import Subject

KeyGroups = list[tuple[str | None, list[Subject]]]
"""(user key, the subjects checked under it), the request's own key first."""


def cap_groups(
    subjects: Sequence[Subject],
    user_key: str | None,
    household_key: str | None,
    request: BidRequest,
) -> tuple[KeyGroups, dict[tuple[str, str], str]]:
    """The subjects grouped by the user key they are checked under, and (campaign id,
    creative id) -> fallback key of those checked under one. Call only when the request
    needs a fallback (no user key, or a low-confidence one)."""
    derived: dict[str, str | None] = {}
    groups: dict[str | None, list[Subject]] = {user_key: []}
    used: dict[tuple[str, str], str] = {}
    for subject in subjects:
        key = user_key
        if subject.fallback != "none":
            if subject.fallback not in derived:
                derived[subject.fallback] = fallback_key(request, subject.fallback, household_key)
            key = derived[subject.fallback] or user_key
            if key is not None and key != user_key:
                used[subject.campaign_id, subject.creative_id] = key
        groups.setdefault(key, []).append(subject)
    return [(key, group) for key, group in groups.items() if group], used
