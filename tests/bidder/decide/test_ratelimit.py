"""Per-SSP token buckets on a manual clock, and the command-line syntax for them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bidder.core.clock import ManualClock
from bidder.decide.ratelimit import (
    OTHER,
    RateLimit,
    RateLimiter,
    RateLimitError,
    RateLimits,
    parse_rate_limits,
)


def limiter(clock: ManualClock, default: RateLimit | None = None) -> RateLimiter:
    limits = RateLimits(per_ssp={"ssp-alpha": RateLimit(qps=10, burst=3)}, default=default)
    return RateLimiter(limits, clock)


def allowed(rl: RateLimiter, ssp: str, n: int) -> int:
    return sum(rl.allow(ssp) for _ in range(n))


def test_a_burst_is_accepted_then_throttled() -> None:
    rl = limiter(ManualClock())
    assert [rl.allow("ssp-alpha") for _ in range(5)] == [True, True, True, False, False]


def test_tokens_refill_at_the_configured_rate() -> None:
    clock = ManualClock()
    rl = limiter(clock)
    allowed(rl, "ssp-alpha", 3)
    clock.advance(0.25)  # 2.5 tokens at 10 qps
    assert allowed(rl, "ssp-alpha", 5) == 2
    clock.advance(0.0625)  # the half token left plus 0.625
    assert allowed(rl, "ssp-alpha", 5) == 1


def test_a_quiet_spell_refills_no_more_than_the_burst() -> None:
    clock = ManualClock()
    rl = limiter(clock)
    clock.advance(3600)
    assert allowed(rl, "ssp-alpha", 10) == 3


def test_partners_without_a_limit_are_not_limited_when_there_is_no_default() -> None:
    rl = limiter(ManualClock())
    assert allowed(rl, "ssp-beta", 1000) == 1000
    assert allowed(rl, "", 10) == 10


def test_partners_without_a_limit_share_the_default_bucket() -> None:
    rl = limiter(ManualClock(), default=RateLimit(qps=1, burst=4))
    assert allowed(rl, "ssp-beta", 3) == 3
    assert allowed(rl, "made-up", 3) == 1  # the same bucket: one token left
    assert allowed(rl, "ssp-alpha", 3) == 3  # its own bucket is untouched


def test_one_partner_throttled_leaves_another_alone() -> None:
    limits = RateLimits(per_ssp={"a": RateLimit(1, 1), "b": RateLimit(1, 1)})
    rl = RateLimiter(limits, ManualClock())
    assert allowed(rl, "a", 10) == 1
    assert rl.allow("b")


def test_qps_zero_and_burst_zero_blocks_a_partner() -> None:
    rl = RateLimiter(RateLimits(per_ssp={"bad": RateLimit(0, 0)}), ManualClock())
    assert allowed(rl, "bad", 5) == 0


def test_metrics_label_is_the_partner_or_other() -> None:
    rl = limiter(ManualClock())
    assert rl.label("ssp-alpha") == "ssp-alpha"
    assert rl.label("anything") == OTHER


@settings(max_examples=100, database=None)
@given(
    st.floats(0.5, 5000),
    st.integers(1, 100),
    st.lists(st.tuples(st.floats(0, 0.5), st.integers(1, 20)), min_size=1, max_size=40),
)
def test_never_more_than_burst_plus_rate_times_elapsed(
    qps: float, burst: int, steps: list[tuple[float, int]]
) -> None:
    clock = ManualClock()
    rl = RateLimiter(RateLimits(per_ssp={"s": RateLimit(qps, burst)}), clock)
    total, elapsed = 0, 0.0
    for dt, n in steps:
        clock.advance(dt)
        elapsed += dt
        total += allowed(rl, "s", n)
        assert total <= burst + qps * elapsed + 1e-6


def test_parse_reads_per_ssp_limits_and_a_default() -> None:
    limits = parse_rate_limits(["ssp-alpha=2000:400", " ssp-beta = 50.5"], default="100:20")
    assert limits.per_ssp == {
        "ssp-alpha": RateLimit(2000.0, 400),
        "ssp-beta": RateLimit(50.5, math.ceil(50.5)),
    }
    assert limits.default == RateLimit(100.0, 20)


def test_parse_without_anything_limits_nothing() -> None:
    assert parse_rate_limits([]) == RateLimits()


def test_parse_blocks_with_zero() -> None:
    assert parse_rate_limits(["bad=0:0"]).per_ssp["bad"] == RateLimit(0.0, 0)


def test_parse_reports_every_problem_at_once() -> None:
    with pytest.raises(RateLimitError) as caught:
        parse_rate_limits(
            ["ssp-alpha", "a=fast", "b=-1", "c=10:x", "d=10:0", "e=1", "e=2", "=5"],
            default="nan",
        )
    message = str(caught.value)
    for fragment in (
        "'ssp-alpha': expected SSP=QPS[:BURST]",
        "'a=fast': QPS must be a number",
        "'b=-1': QPS must be a finite number >= 0",
        "'c=10:x': BURST must be a whole number",
        "'d=10:0': BURST 0 would block every request",
        "'e' is given twice",
        "'=5': expected SSP=QPS[:BURST]",
        "--rate-limit-default 'nan'",
    ):
        assert fragment in message
