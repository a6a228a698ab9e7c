"""``GET /notice/view?t=<token>``: the exchange's word that an impression became viewable.

The exchange (or its measurement vendor) calls it once an impression met the MRC
standard: half of its pixels in view for 1 s (2 s for video). The token is the one of
the bid's win and billing notices and passes the same checks (``parse_view``); a
refused notice is a 400 naming the reason and changes nothing. A valid one is counted
against the caps of a campaign whose caps count viewable impressions
(``cap_policy.impressions: viewable``); for any other campaign it changes nothing.
Counting is idempotent per impression (the count script's mark), so a replayed view
notice counts once. When Valkey fails the count is retried in the background and the
notice is answered 202.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bidder.core import metrics
from bidder.core.clock import Clock
from bidder.core.tokens import NoticeClaims, TokenSigner
from bidder.serve.http.messages import Request, Response, text
from bidder.winloop.notices import NoticeError, parse_view
from fcap import CountOutcome

VIEW_PATH = "/notice/view"

CountViewable = Callable[[NoticeClaims], Awaitable[CountOutcome | None]]
"""Counts a verified view notice; None when the count was left to background retries."""


class ViewNoticeHandler:
    def __init__(
        self, signer: TokenSigner, clock: Clock, max_age_ms: int, count: CountViewable | None
    ) -> None:
        self._signer = signer
        self._clock = clock
        self._max_age_ms = max_age_ms
        self._count = count
        self._outcomes = {o: metrics.NOTICES.labels("view", o.value) for o in CountOutcome}
        self._retried = metrics.NOTICES.labels("view", "retried")

    async def handle(self, request: Request) -> Response:
        try:
            claims = parse_view(
                request.query, self._signer, self._clock.wall_ms(), self._max_age_ms
            )
        except NoticeError as exc:
            metrics.NOTICES_REJECTED.labels("view", exc.reason).inc()
            return text(400, str(exc))
        outcome = CountOutcome.NOT_COUNTED if self._count is None else await self._count(claims)
        if outcome is None:
            self._retried.inc()
            return Response(202)
        self._outcomes[outcome].inc()
        return Response(204)
