"""Campaign settings that are valid but can never take effect. Pure.

``bidsim campaigns check`` prints them as warnings: the file still loads, but a reader
of the campaign would expect something the bidder will never do.
"""

from __future__ import annotations

from collections.abc import Iterable

from bidder.core.campaigns import Campaign, CapPolicy

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
        return [
            f"cap_policy.{name} is set but the campaign has no frequency_caps"
            for name in ("count_on", "on_store_error", "impressions")
            if getattr(policy, name) != getattr(CapPolicy(), name)
        ]
    if policy.impressions != "viewable":
        return []
    if policy.count_on == "bid":
        return [
            "cap_policy.impressions 'viewable' has no effect with count_on 'bid':"
            " a slot is reserved at bid time, whatever the impression becomes"
        ]
    if all(creative.format in NEVER_VIEWABLE for creative in c.creatives):
        return [
            "cap_policy.impressions 'viewable' on audio creatives only: audio is never"
            " viewable, so the caps never count anything"
        ]
    return []
