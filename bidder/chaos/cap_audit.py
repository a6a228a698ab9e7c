"""Cap over-delivery of a live replay: its notices recorded, then audited against the caps.

How: the bidder's public URL points at a ``NoticeRecorder`` (``with_recorded_notices``),
so the exchange model's nurl/burl calls go through it and it keeps every signed token
and when the bidder answered it; every worker signs with one shared key, so the tokens
verify here (``signer_of``). Each token names one delivered impression: user,
household, campaign, creative and bid instant. After the run ``audit_delivered`` judges
them with ``fcap.audit.cap_over_delivery`` against the campaign book, with the count
times the answers bound (``fcap.audit.counted_times``), so an impression above a cap is
either explained by count-on-win bids in flight or not (``not_in_flight``).

What may explain the rest is a failed store call (``StoreErrors``, from
``bidsim_fcap_store_errors_total``), hence the bound ``DeliveryAudit.bound``:

- a failed cap check on a fail-open campaign (the default cap policy, docs/fcap.md):
  its candidates bid unchecked, and such a bid may be above a cap: one impression. A
  reserve-at-bid campaign's bid also goes out unreserved, and reserve-at-bid
  impressions are counted by their reservation only, so that impression is never
  counted: each of its counters runs one short for the window and lets one more
  through. Per failed check: 1 + the most counters of a reserve-at-bid, fail-open
  subject (``per_failed_check``; 3 for the bundled book). A request's imps share one
  check, so a multi-imp request could pass one per imp: not budgeted; the failed
  checks of requests that are never delivered (probes) loosen the bound instead;
- a failed count (the win notice's count while the user's shard had no master; each
  failed retry counts again): the impression is billed but missing from its counters,
  each of which lets one more through: the most counters a counted impression is
  written to (``per_failed_count``; 2 for the bundled book).

Counts acknowledged by a dying master but not yet replicated are lost with it too;
the replication lag is well under a millisecond (docs/fcap.md), about 0.01 lost
counts per failover at these rates: not budgeted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bidder.chaos.harness import CAMPAIGNS
from bidder.core.campaign_docs import load_campaign_file
from bidder.core.tokens import NoticeClaims, TokenSigner, generate_key
from bidder.replay.admin_metrics import metric
from bidder.replay.notice_recorder import NoticeRecorder
from bidder.serve.settings import Settings
from fcap.audit import OverDelivery, cap_over_delivery, claims_from_notice_urls, counted_times
from fcap.rules import Subject, build_subjects

NOTICE_KEY_ID = "chaos"


def with_recorded_notices(settings: Settings, recorder: NoticeRecorder) -> Settings:
    """``settings`` whose notices go through ``recorder`` (which forwards them to the
    bidder), signed by every worker with one key (a fresh one unless set)."""
    recorder.target = f"http://{settings.host}:{settings.port}"
    keys = settings.notice_keys or ((NOTICE_KEY_ID, generate_key()),)
    return settings.replace(public_url=recorder.public_url, notice_keys=keys).validate()


def signer_of(settings: Settings) -> TokenSigner:
    """A verifier of the tokens the bidder signs with ``settings``' notice keys."""
    if not settings.notice_keys:
        raise ValueError("no notice keys: each worker signs with a key of its own")
    keys = {kid: secret.encode() for kid, secret in settings.notice_keys}
    return TokenSigner(keys, settings.active_notice_key_id or settings.notice_keys[0][0])


@dataclass(frozen=True, slots=True)
class StoreErrors:
    checks: int
    """Cap checks that failed or timed out and whose candidates may have bid."""
    counts: int
    """Win counts that failed (retries included)."""


@dataclass(frozen=True)
class DeliveryAudit:
    """The impressions the exchange delivered and the audit of their caps."""

    delivered: tuple[NoticeClaims, ...]
    subjects: Mapping[tuple[str, str], Subject]
    over_delivery: OverDelivery

    @property
    def capped_impressions(self) -> int:
        """Audited impressions (viewable-counted campaigns excluded) of campaigns with a
        cap: what the over-delivery figure is measured on."""
        return sum(
            subject.has_caps and subject.count_event != "viewable"
            for subject in (self.subjects[c.campaign_id, c.creative_id] for c in self.delivered)
        )

    def bid_between(self, start_ms: int, end_ms: int) -> OverDelivery:
        """The audit of the impressions bid in ``[start_ms, end_ms)`` (their counters
        still hold every earlier impression)."""
        bids = {c.bid_id for c in self.delivered if start_ms <= c.issued_ms < end_ms}
        audited = sum(
            self.subjects[c.campaign_id, c.creative_id].count_event != "viewable"
            for c in self.delivered
            if c.bid_id in bids
        )
        found = tuple(f for f in self.over_delivery.above_cap if f.bid_id in bids)
        return OverDelivery(audited, found)

    @property
    def per_failed_check(self) -> int:
        """Impressions one failed check can put above a cap (module docstring)."""
        reserving = (s for s in self.subjects.values() if s.reserve and not s.fail_closed)
        return 1 + max(map(_counters, reserving), default=0)

    @property
    def per_failed_count(self) -> int:
        """Impressions one failed count can put above a cap (module docstring)."""
        counted = (s for s in self.subjects.values() if s.count_event == "win")
        return max(map(_counters, counted), default=0)

    def bound(self, errors: StoreErrors) -> int:
        """The most impressions above a cap that bids in flight do not explain, after
        ``errors``."""
        return errors.checks * self.per_failed_check + errors.counts * self.per_failed_count


def _counters(subject: Subject) -> int:
    return len(subject.user_count_rules) + len(subject.household_rules)


def audit_delivered(
    answers: Sequence[tuple[str, int, int]],
    signer: TokenSigner,
    deadline_ms: float,
    campaigns: Path = CAMPAIGNS,
) -> DeliveryAudit:
    """Every impression whose notice (``NoticeRecorder.answers``) carries a token
    ``signer`` verifies (one per bid id, billed or not: the exchange delivered it),
    judged against ``campaigns``' caps as bid under ``deadline_ms``. Raises KeyError
    for an impression of a campaign/creative not in the file."""
    delivered = tuple(claims_from_notice_urls((url for url, _, _ in answers), signer))
    subjects = build_subjects(load_campaign_file(campaigns))
    counted_ms = counted_times(answers, signer)
    audit = cap_over_delivery(delivered, subjects, counted_ms=counted_ms, deadline_ms=deadline_ms)
    return DeliveryAudit(delivered, subjects, audit)


async def store_errors(admin_url: str) -> StoreErrors:
    """The workers' failed cap-store calls so far (``bidsim_fcap_store_errors_total``)."""
    name = "bidsim_fcap_store_errors_total"
    checks = await metric(admin_url, name, {"op": "check"})
    counts = await metric(admin_url, name, {"op": "count"})
    return StoreErrors(int(checks), int(counts))
