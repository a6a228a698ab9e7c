"""Stage 8's work for one request: score in one batch, then price every candidate.

Candidates of campaigns with a ``click_value_micros`` are *scored*: their feature rows
go to the model in one predict call, and each is priced by ``models.price`` (value x
P(click), capped by the max bid, floor respected, shaded in first-price auctions).
Campaigns without a click value keep the base bid (``bidder.decide.pricing.base_price``) and
cost the model nothing. A candidate whose price would be under the floor is dropped.

The creatives' own feature columns come from a table computed when the campaigns were
loaded (``models.features.creative_table``); the request's columns are computed once.

Any fault while building features, predicting or pricing is raised as
``ScoringError``, which the stage turns into a SCORE_ERROR no-bid (a 204, never a 5xx).
The model is read from the ``ModelHandle`` once per request, so a reload in between
changes whole requests only.
"""

from __future__ import annotations

from collections.abc import Sequence

from bidder.core.clock import Clock
from bidder.decide.eligibility import Candidate
from bidder.decide.pricing import base_price
from bidder.decide.profiles import Profile
from bidder.openrtb.view import BidRequest
from models import features
from models.price import bid_price, impression_value, unshaded_price
from models.scorer import ModelHandle, ScoringError


class Pricer:
    def __init__(self, model: ModelHandle, clock: Clock, shading: bool = True) -> None:
        """``shading`` False bids the ceiling in first-price auctions too."""
        self.model = model
        self._clock = clock
        self._shading = shading

    def price(
        self,
        request: BidRequest,
        ssp: str,
        profile: Profile | None,
        candidates: Sequence[Candidate],
        table: features.CreativeTable = features.NO_TABLE,
        unshaded: list[tuple[Candidate, int]] | None = None,
    ) -> list[tuple[Candidate, int]]:
        """(candidate, CPM price in micros) for each candidate worth a bid, in order.

        ``table``: the creatives' own feature columns (``features.creative_table``).
        ``unshaded``, when given, receives (candidate, the price it would bid
        unshaded) for each candidate worth a bid: the ceiling for a scored one, the
        base price (never shaded) otherwise. Raises ScoringError when the model or the
        pricing fails.
        """
        scored = [c for c in candidates if c.campaign.click_value_micros is not None]
        ceilings: list[int] | None = None if unshaded is None else []
        scored_prices = iter(self._scored_prices(request, ssp, profile, scored, table, ceilings))
        out = []
        for candidate in candidates:
            if candidate.campaign.click_value_micros is None:
                price = base_price(candidate)
            else:
                price = next(scored_prices)  # scored keeps the candidates' order
            if price is not None:
                out.append((candidate, price))
        if unshaded is not None and ceilings is not None:
            by_candidate = {id(c): ceiling for c, ceiling in zip(scored, ceilings, strict=True)}
            unshaded.extend((c, by_candidate.get(id(c), price)) for c, price in out)
        return out

    def _scored_prices(
        self,
        request: BidRequest,
        ssp: str,
        profile: Profile | None,
        scored: list[Candidate],
        table: features.CreativeTable,
        ceilings: list[int] | None,
    ) -> list[int | None]:
        """The scored candidates' prices; their unshaded prices into ``ceilings`` if given."""
        if not scored:
            return []
        scorer = self.model.current
        win_rate = scorer.win_rate if self._shading else None
        at = request.at
        try:
            rows = features.pack_rows(request, ssp, profile, scored, self._clock.wall_ms(), table)
            p_clicks = scorer.predict(rows)
            if ceilings is not None:
                ceilings.extend(
                    unshaded_price(
                        impression_value(c.campaign.click_value_micros or 0, p),
                        c.campaign.max_bid_cpm_micros,
                    )
                    for c, p in zip(scored, p_clicks, strict=True)
                )
            return [
                bid_price(
                    impression_value(c.campaign.click_value_micros or 0, p),
                    c.imp.bidfloor_micros,
                    c.campaign.max_bid_cpm_micros,
                    at,
                    win_rate,
                )
                for c, p in zip(scored, p_clicks, strict=True)
            ]
        except ScoringError:
            raise
        except Exception as exc:  # any fault in our own code: a typed no-bid, not a 5xx
            raise ScoringError(f"scoring failed: {exc!r}") from exc
