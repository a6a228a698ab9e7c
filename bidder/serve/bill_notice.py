"""``GET /notice/win`` and ``GET /notice/bill``: the exchange's word that a bid won or
was billed (see ``bidder.winloop.notices`` and ``bidder.winloop.billing``).

A refused notice is a 400 naming the reason and changes nothing but the rejected
counter; a first valid notice bills the impression; a repeat is a duplicate (2xx,
counted, no spend). A win for a nurl-served creative returns its markup, duplicate or
not (the exchange may be retrying because it lost the markup). A valid notice whose
billing can't be done now (Valkey, spool or ids down) is journaled and answered 202
(its markup for such a win): it is billed exactly once when they are back. Only when
even the journal can't be written is it a 503, so the exchange retries rather than the
impression being lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from bidder.core import metrics
from bidder.core.clock import Clock
from bidder.core.tokens import TokenSigner
from bidder.pipeline.campaign_book import CampaignBook
from bidder.serve.http import messages
from bidder.serve.http.messages import Request, Response
from bidder.winloop.billable import BillingOutcome
from bidder.winloop.billing import Biller, BillingUnavailable
from bidder.winloop.notices import NoticeError, parse_notice


@dataclass(frozen=True)
class NoticeParts:
    """What both notice routes use."""

    signer: TokenSigner
    clock: Clock
    biller: Biller
    book: CampaignBook
    max_age_ms: int


class NoticeHandler:
    def __init__(self, parts: NoticeParts, kind: str):
        self._parts = parts
        self._kind = kind
        self._outcomes = {o: metrics.NOTICES.labels(kind, o.value) for o in _OUTCOMES}

    async def handle(self, request: Request) -> Response:
        parts = self._parts
        try:
            notice = parse_notice(
                request.query, parts.signer, parts.clock.wall_ms(), parts.max_age_ms
            )
        except NoticeError as exc:
            metrics.NOTICES_REJECTED.labels(self._kind, exc.reason).inc()
            return messages.text(400, str(exc))
        try:
            outcome = await parts.biller.bill(notice, self._kind)
        except BillingUnavailable:  # logged loudly by the biller: neither billed nor journaled
            self._outcomes[BillingOutcome.UNAVAILABLE].inc()
            return messages.text(503, "try again later", {"Retry-After": "5"})
        self._outcomes[outcome].inc()
        claims = notice.claims
        creative = parts.book.index.creative(claims.campaign_id, claims.creative_id)
        if self._kind == "win" and creative is not None and creative.serve == "nurl":
            return messages.html(creative.markup)
        return Response(202 if outcome is BillingOutcome.DEFERRED else 204)


_OUTCOMES = (
    BillingOutcome.BILLED,
    BillingOutcome.DUPLICATE,
    BillingOutcome.DEFERRED,
    BillingOutcome.UNAVAILABLE,
)
"""The outcomes of a live notice (the others are replays'), counted from zero."""
