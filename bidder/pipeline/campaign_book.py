"""The worker's in-memory campaigns, refreshed from the store in the background.

The bid path only reads ``book.index``, an immutable ``CampaignIndex``, and what is
computed per campaign + creative when the campaigns are loaded: ``book.cap_subjects``
(what it is frequency-capped by), ``book.feature_columns`` (its own feature columns,
``models.features``) and ``book.bid_templates`` (its pre-rendered part of a bid,
``bidder.pipeline.response``). All are swapped together on refresh with no await between, so
a stage never sees half an update. A request that awaits between stages may meet a
newer book than its candidates came from: scoring and the response use a table entry
only when its creative is the candidate's own object, and compute it from the
candidate otherwise. The store is read with boto3 in a worker thread (boto3 never
runs on the event loop). A failed refresh keeps the last good index; an unchanged
store skips the rebuild.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence

import orjson

from bidder.adapters.campaign_store import CampaignTable
from bidder.core import metrics
from bidder.core.campaign_docs import campaigns_from_docs
from bidder.core.campaigns import Campaign
from bidder.decide.eligibility import CampaignIndex
from bidder.pipeline.response import BidTemplate, bid_templates
from fcap import Subject, build_subjects
from models.features import CreativeColumns, creative_table

log = logging.getLogger(__name__)


class CampaignBook:
    def __init__(self, table: CampaignTable):
        self._table = table
        self._digest = ""
        self.index = CampaignIndex([])
        self.cap_subjects: dict[tuple[str, str], Subject] = {}
        self.feature_columns: dict[tuple[str, str], CreativeColumns] = {}
        self.bid_templates: dict[tuple[str, str], BidTemplate] = {}
        self.fallback_caps = False
        """Some subject has a fallback policy: only then does stage 7 derive fallback keys."""

    async def refresh(self) -> bool:
        """Reload from the store; True when the index changed. Raises on store errors."""
        docs = await asyncio.to_thread(self._table.scan_docs)
        digest = hashlib.sha256(orjson.dumps(docs, option=orjson.OPT_SORT_KEYS)).hexdigest()
        if digest == self._digest:
            return False
        self.install(campaigns_from_docs(docs))
        self._digest = digest
        return True

    def install(self, campaigns: Sequence[Campaign]) -> None:
        """Swap in these campaigns, everything computed from them at once."""
        index, subjects = CampaignIndex(campaigns), build_subjects(campaigns)
        columns, templates = creative_table(campaigns), bid_templates(campaigns)
        self.index, self.cap_subjects = index, subjects
        self.fallback_caps = any(s.fallback != "none" for s in subjects.values())
        self.feature_columns, self.bid_templates = columns, templates
        metrics.CAMPAIGNS_ACTIVE.set(len(self.index))  # the index holds the active ones

    async def keep_fresh(self, interval_s: float) -> None:
        """Refresh forever; errors are counted and logged, the last good index stays."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                changed = await self.refresh()
            except Exception as exc:  # any store or data fault: keep serving the last good set
                metrics.CAMPAIGN_REFRESHES.labels("error").inc()
                log.warning("campaign refresh failed, keeping the last good set: %s", exc)
                continue
            metrics.CAMPAIGN_REFRESHES.labels("changed" if changed else "unchanged").inc()
