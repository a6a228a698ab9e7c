"""How often a node re-reads its leases, against how long a lease lives (two ticks)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from pacing.lease import EXPIRY_TICKS
from pacing.refresher import refresh_interval_s

ticks = st.floats(0.05, 10.0)
refreshes = st.floats(0.05, 60.0)
phases = st.floats(0.0, 1.0)


def _longest_expired_gap(tick_s: float, refresh_s: float, phase: float, lag_s: float) -> float:
    """The longest a node holds an expired lease over 50 refreshes: leases are written at
    k x tick and live two ticks; the node reads at phase x tick + j x (refresh + lag)."""
    worst, at = -math.inf, phase * tick_s
    for _ in range(50):
        written = math.floor(at / tick_s) * tick_s  # the newest lease at the read
        following = at + refresh_s + lag_s
        worst = max(worst, following - (written + EXPIRY_TICKS * tick_s))
        at = following
    return worst


@given(ticks, refreshes, phases)
def test_a_node_reads_a_new_lease_before_the_one_it_holds_expires(
    tick_s: float, lease_refresh_s: float, phase: float
) -> None:
    refresh_s = refresh_interval_s(lease_refresh_s, tick_s)
    # a refresh may take up to half its interval on a busy machine
    assert _longest_expired_gap(tick_s, refresh_s, phase, refresh_s / 2) < 0


def test_the_configured_interval_stands_when_it_is_short_enough() -> None:
    assert refresh_interval_s(1.0, 5.0) == 1.0
    assert refresh_interval_s(1.0, 0.5) == 0.25


def test_once_a_tick_is_not_enough() -> None:
    """The short live day's settings before the bound: 0.5 s ticks, refresh every 1 s."""
    assert _longest_expired_gap(0.5, 1.0, 0.3, 0.0) > 0
