"""Campaign settings that are valid but can never take effect. Pure.

``bidsim campaigns check`` prints them as warnings: the file still loads, but a reader
of the campaign would expect something the bidder will never do.
"""

from __future__ import annotations

from collections.abc import Iterable

from bidder.core.campaigns import Campaign, CapPolicy, class_of_flags

NEVER_VIEWABLE = frozenset({"audio"})
"""Formats with no pixels to be in view (the MRC standard counts display and video)."""


def never_in_effect(campaigns: Iterable[Campaign]) -> list[str]:
    """One line per setting that cannot take effect, naming the campaign and the setting."""
    warnings: list[str] = []
    for campaign in campaigns:
        warnings += [f"campaign {campaign.id}: {text}" for text in _campaign(campaign)]
    return warnings


def _campaign(c: Campaign) -> list[str]:
    policy = c.cap_policy
    if not c.frequency_caps:
        # A class other than the default that the flags do not map onto was named in the
        # file (loose, or a class with a flag overridden); flags are warned one by one.
        mapped = class_of_flags(policy.count_on, policy.on_store_error)
        named = policy.cap_class not in (CapPolicy().cap_class, mapped)
        return [
            f"cap_policy.{name} is set but the campaign has no frequency_caps"
            for name in ("count_on", "on_store_error", "impressions", "fallback")
            if getattr(policy, name) != getattr(CapPolicy(), name)
        ] + (["cap_policy.class is set but the campaign has no frequency_caps"] if named else [])
    warnings = _fallback(c)
    if policy.impressions != "viewable":
        return warnings
    if policy.count_on == "bid":
        return [
            *warnings,
            "cap_policy.impressions 'viewable' has no effect with count_on 'bid':"
            " a slot is reserved at bid time, whatever the impression becomes",
        ]
    if all(creative.format in NEVER_VIEWABLE for creative in c.creatives):
        return [
            *warnings,
            "cap_policy.impressions 'viewable' on audio creatives only: audio is never"
            " viewable, so the caps never count anything",
        ]
    return warnings


def _fallback(c: Campaign) -> list[str]:
    """A fallback key stands in for the user key only: household caps already have theirs."""
    policy = c.cap_policy
    if policy.fallback == "none" or any(cap.scope != "household" for cap in c.frequency_caps):
        return []
    return [
        f"cap_policy.fallback {policy.fallback!r} has no effect: the campaign has household"
        " caps only, which never use a user key"
    ]
