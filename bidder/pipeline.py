"""The decision pipeline: stages that narrow the candidates or say why not.

Every stage has one contract: ``await stage(ctx, deadline)`` either narrows
``ctx.candidates`` (and may attach prices) and returns None, or returns the
``NoBid`` reason that ends the auction for us. Stages run in the order of the
design's hot path, cheapest first, because ~97% of requests end in a no-bid and
the cheapest stage that can decide should:

    1. parse + shape check          bidder.openrtb (before the pipeline: it makes ctx)
    2. partner rate limit           (issue: supply chain, consent and partner protection)
    3. eligibility                  bidder.eligibility
    4. supply chain + consent       (issue: supply chain, consent and partner protection)
    5. identity + profile           (issue: scoring and pricing)
    6. budget / pacing              (issue: budget pacing)
    7. frequency cap                (issue: frequency capping on Valkey)
    8. score + price                bidder.pricing, base bid until scoring lands
    9. respond                      bidder.response (after the pipeline)

Stages that have not landed are absent, not faked. The caller enforces the
deadline around the whole run with ``asyncio.timeout_at``, so an awaiting stage
is cancelled at the deadline; ``deadline`` is passed so a stage can give a
sub-call (a Valkey round trip) its own tighter bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bidder.eligibility import Candidate
from bidder.nobid import NoBid
from bidder.openrtb import BidRequest


@dataclass(slots=True)
class PricedCandidate:
    candidate: Candidate
    price_cpm_micros: int


@dataclass(slots=True)
class Context:
    request: BidRequest
    ssp: str
    received: float
    """Loop time at receipt."""
    candidates: list[Candidate] = field(default_factory=list)
    priced: list[PricedCandidate] = field(default_factory=list)


class Stage(Protocol):
    async def __call__(self, ctx: Context, deadline: float) -> NoBid | None: ...


async def run_stages(stages: Sequence[Stage], ctx: Context, deadline: float) -> NoBid | None:
    """Run stages in order; the first no-bid reason ends the run."""
    for stage in stages:
        reason = await stage(ctx, deadline)
        if reason is not None:
            return reason
    return None
