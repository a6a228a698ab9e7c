"""Stage 2, partner protection: a token bucket per supply partner.

Each configured SSP (the ``X-Ssp`` header) has a bucket holding up to ``burst``
tokens, refilled at ``qps`` tokens per second of the injected clock; a request takes
one token or is throttled. Refill is computed lazily from the time since the bucket
was last touched, so there is no timer and a decision is a dict probe and a few float
operations (well under a microsecond). Partners without their own limit share ONE
bucket with the default limit: the header is not authenticated, and a bucket per
unknown name would let a caller grow memory without bound by inventing names. No
default means unknown partners are not limited.

Each worker process has its own limiter, so with N workers a partner's effective limit
is N x qps (connections are spread by the kernel); configure per-worker figures.

``parse_rate_limits`` reads the command-line form ``SSP=QPS[:BURST]`` (repeatable) and
``QPS[:BURST]`` for the default, and reports every problem at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bidder.core.clock import Clock

OTHER = "other"
"""The metrics label (and bucket) shared by partners without a limit of their own."""


class RateLimitError(ValueError):
    """A rate-limit option is malformed; the message names each bad value."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    qps: float
    """Sustained requests per second."""
    burst: int
    """Bucket size: requests accepted at once after a quiet spell."""


@dataclass(frozen=True, slots=True)
class RateLimits:
    per_ssp: Mapping[str, RateLimit] = field(default_factory=dict)
    default: RateLimit | None = None
    """Limit of the bucket shared by every other partner; None: not limited."""


class _Bucket:
    __slots__ = ("burst", "last", "rate", "tokens")

    def __init__(self, limit: RateLimit, now: float) -> None:
        self.rate, self.burst = limit.qps, float(limit.burst)
        self.tokens, self.last = float(limit.burst), now


class RateLimiter:
    def __init__(self, limits: RateLimits, clock: Clock) -> None:
        self._clock = clock
        now = clock.monotonic()
        self._buckets = {ssp: _Bucket(limit, now) for ssp, limit in limits.per_ssp.items()}
        self._other = _Bucket(limits.default, now) if limits.default is not None else None

    def allow(self, ssp: str) -> bool:
        """Take one token from ``ssp``'s bucket; False means answer 204 throttled."""
        bucket = self._buckets.get(ssp, self._other)
        if bucket is None:
            return True
        now = self._clock.monotonic()
        tokens = bucket.tokens + (now - bucket.last) * bucket.rate
        bucket.last = now
        if tokens > bucket.burst:
            tokens = bucket.burst
        if tokens >= 1.0:
            bucket.tokens = tokens - 1.0
            return True
        bucket.tokens = tokens
        return False

    def label(self, ssp: str) -> str:
        """The bounded metrics label for ``ssp``: its own name if configured, else OTHER."""
        return ssp if ssp in self._buckets else OTHER


def parse_rate_limits(specs: Sequence[str], default: str | None = None) -> RateLimits:
    """``["ssp-alpha=2000:400", ...]`` and ``"500:100"`` -> RateLimits; raises RateLimitError.

    BURST defaults to one second of traffic (``ceil(QPS)``, at least 1). QPS 0 with
    BURST 0 blocks a partner outright.
    """
    problems: list[str] = []
    per_ssp: dict[str, RateLimit] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        name = name.strip()
        if not sep or not name:
            problems.append(f"--rate-limit {spec!r}: expected SSP=QPS[:BURST]")
            continue
        if name in per_ssp:
            problems.append(f"--rate-limit: {name!r} is given twice")
            continue
        limit = _limit(value, f"--rate-limit {spec!r}", problems)
        if limit is not None:
            per_ssp[name] = limit
    default_limit = None
    if default is not None:
        default_limit = _limit(default, f"--rate-limit-default {default!r}", problems)
    if problems:
        raise RateLimitError("; ".join(problems))
    return RateLimits(per_ssp=per_ssp, default=default_limit)


def _limit(text: str, where: str, problems: list[str]) -> RateLimit | None:
    qps_text, sep, burst_text = text.strip().partition(":")
    try:
        qps = float(qps_text)
    except ValueError:
        problems.append(f"{where}: QPS must be a number, got {qps_text!r}")
        return None
    if not math.isfinite(qps) or qps < 0:
        problems.append(f"{where}: QPS must be a finite number >= 0")
        return None
    if not sep:
        return RateLimit(qps, max(1, math.ceil(qps)))
    if not burst_text.strip().isdigit():
        problems.append(f"{where}: BURST must be a whole number >= 0, got {burst_text!r}")
        return None
    burst = int(burst_text)
    if burst == 0 and qps > 0:
        problems.append(f"{where}: BURST 0 would block every request; use QPS 0 to block")
        return None
    return RateLimit(qps, burst)
