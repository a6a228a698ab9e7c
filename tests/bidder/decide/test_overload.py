"""Overload shedding: the loop-lag estimate, the in-flight gate, and both live.

The pure parts run on a ManualClock. The live tests stall a real bidder: a stage
that holds the loop (time.sleep) until a second request has been sent, or that
holds its in-flight place until told; the second request must be shed with a 204
``overloaded`` and a later one must not be.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import threading
import time
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.core.clock import ManualClock
from bidder.core.nobid import NoBid
from bidder.decide.overload import InFlightGate, LagShedder, LoopLag
from bidder.pipeline.runner import Context, Stage
from bidder.serve.app import BidderState
from bidder.serve.settings import Settings, SettingsError
from bidder.stack.child import held_port
from tests.bidder.conftest import EXTERNAL
from tests.bidder.live import Answer, DeadlineProbe, LiveBidder, StagesHook

pytestmark = pytest.mark.long(12)

SIMPLE_BANNER = (EXTERNAL / "requests" / "001_iab26_spec-6.2.1-simple-banner.json").read_bytes()
HOLD_S = 0.008
WAIT_S = 10.0
"""Bound on waiting for the other thread; never reached when things work."""


# --- LoopLag --------------------------------------------------------------------------


def test_no_heartbeat_yet_means_no_lag() -> None:
    assert LoopLag(ManualClock(), HOLD_S).current() == 0.0


def test_a_late_heartbeat_reports_how_late_it_fired() -> None:
    clock = ManualClock()
    lag = LoopLag(clock, HOLD_S)
    clock.advance(0.005)
    assert lag.observe(scheduled=0.002) == pytest.approx(0.003)
    assert lag.current() == pytest.approx(0.003)


def test_an_early_heartbeat_counts_as_no_lag() -> None:
    clock = ManualClock(start_monotonic=1.0)
    lag = LoopLag(clock, HOLD_S)
    assert lag.observe(scheduled=1.001) == 0.0
    assert lag.current() == 0.0


def test_a_stall_is_held_for_the_hold_window_then_forgotten() -> None:
    clock = ManualClock()
    lag = LoopLag(clock, HOLD_S)
    lag.observe(scheduled=-0.020)
    clock.advance(HOLD_S)
    assert lag.current() == pytest.approx(0.020)
    clock.advance(0.0001)
    assert lag.current() == 0.0


def test_the_worst_lag_in_the_window_wins_over_later_smaller_ones() -> None:
    clock = ManualClock()
    lag = LoopLag(clock, HOLD_S)
    lag.observe(scheduled=-0.010)
    clock.advance(0.002)
    lag.observe(scheduled=clock.monotonic() - 0.001)
    assert lag.current() == pytest.approx(0.010)


def test_a_hold_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="hold_s"):
        LoopLag(ManualClock(), 0.0)


beats = st.lists(
    st.tuples(st.floats(0, 0.02), st.floats(0, 0.02)), min_size=1, max_size=40
)  # (time since the previous beat, lateness)


@given(beats)
def test_current_is_the_worst_lateness_observed_within_the_hold(
    steps: list[tuple[float, float]],
) -> None:
    clock = ManualClock()
    lag = LoopLag(clock, HOLD_S)
    seen: list[tuple[float, float]] = []
    for gap, lateness in steps:
        clock.advance(gap)
        now = clock.monotonic()
        recorded = lag.observe(scheduled=now - lateness)
        seen.append((now, recorded))
        held = [late for at, late in seen if at >= now - HOLD_S]
        assert lag.current() == max(held)


# --- LagShedder -----------------------------------------------------------------------


def _shedder() -> LagShedder:
    return LagShedder(enter_s=0.004, stay_s=0.001, calm_s=0.2)


def test_a_lag_under_the_high_bound_is_not_shed_while_calm() -> None:
    assert _shedder().shed(0.003, now=10.0) is False


def test_a_lag_past_the_high_bound_is_shed_and_marks_the_worker_overloaded() -> None:
    shedder = _shedder()
    assert shedder.shed(0.005, now=10.0) is True
    assert shedder.overloaded(10.1)


def test_an_overloaded_worker_sheds_at_the_low_bound() -> None:
    shedder = _shedder()
    shedder.shed(0.005, now=10.0)
    assert shedder.shed(0.002, now=10.1) is True
    assert shedder.shed(0.0005, now=10.15) is False  # under the low bound: admitted


def test_an_overloaded_worker_is_calm_again_after_calm_s_under_the_low_bound() -> None:
    shedder = _shedder()
    shedder.shed(0.005, now=10.0)
    shedder.shed(0.002, now=10.1)  # still over the low bound: the calm restarts
    assert shedder.overloaded(10.29)
    assert not shedder.overloaded(10.31)
    assert shedder.shed(0.002, now=10.31) is False


@given(lags=st.lists(st.floats(0, 0.02), max_size=50))
def test_a_lag_past_the_high_bound_is_always_shed_and_one_under_the_low_never(
    lags: list[float],
) -> None:
    shedder = _shedder()
    for n, lag in enumerate(lags):
        shed = shedder.shed(lag, now=n * 0.01)
        if lag > 0.004:
            assert shed
        if lag <= 0.001:
            assert not shed


def test_a_new_worker_pushes_back_as_hard_as_it_can() -> None:
    shedder = _shedder()
    assert (shedder.pressure, shedder.stay_s) == (1.0, 0.001)


def _overloaded() -> LagShedder:
    """A shedder that shed at 10.0 s: overloaded until 10.2 s."""
    shedder = _shedder()
    shedder.shed(0.005, now=10.0)
    return shedder


def _answers(
    shedder: LagShedder, n: int, now: float = 10.05, *, late: bool = False, cut: bool = False
) -> None:
    for _ in range(n):
        shedder.answered(now, late=late, cut=cut)


def test_answers_in_time_while_overloaded_ease_the_pressure_up_to_the_high_bound() -> None:
    shedder = _overloaded()
    _answers(shedder, LagShedder.EASE_ANSWERS // 2)
    assert (shedder.pressure, shedder.stay_s) == (pytest.approx(0.5), pytest.approx(0.0025))
    assert shedder.shed(0.002, now=10.1) is False  # was shed at the 1 ms floor
    assert shedder.shed(0.003, now=10.1) is True
    _answers(shedder, LagShedder.EASE_ANSWERS, now=10.15)
    assert (shedder.pressure, shedder.stay_s) == (0.0, pytest.approx(0.004))
    assert shedder.shed(0.0039, now=10.2) is False


def test_a_late_answer_sets_the_pressure_back_to_full() -> None:
    shedder = _overloaded()
    _answers(shedder, LagShedder.EASE_ANSWERS)
    assert shedder.shed(0.0011, now=10.1) is False
    _answers(shedder, 1, late=True)
    assert (shedder.pressure, shedder.stay_s) == (1.0, 0.001)
    assert shedder.shed(0.0011, now=10.1) is True


def test_a_decision_cut_short_by_the_deadline_raises_the_pressure_a_few_steps() -> None:
    shedder = _overloaded()
    _answers(shedder, LagShedder.EASE_ANSWERS)
    _answers(shedder, 1, cut=True)
    assert shedder.pressure == pytest.approx(LagShedder.CUT_WEIGHT / LagShedder.EASE_ANSWERS)
    _answers(shedder, LagShedder.EASE_ANSWERS, cut=True)
    assert shedder.pressure == 1.0


def test_answers_while_calm_leave_the_pressure_alone() -> None:
    shedder = _shedder()
    _answers(shedder, LagShedder.EASE_ANSWERS, now=10.0)  # never overloaded: nothing learned
    assert shedder.pressure == 1.0
    shedder = _overloaded()
    _answers(shedder, LagShedder.EASE_ANSWERS // 4)
    _answers(shedder, 1, now=11.0, late=True)  # calm since 10.2 s
    assert shedder.pressure == pytest.approx(0.75)
    _answers(shedder, 1, now=10.1, late=True)
    assert shedder.pressure == 1.0


@given(outcomes=st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=600))
def test_the_pressure_stays_in_0_1_and_the_low_bound_between_its_floor_and_the_high_one(
    outcomes: list[tuple[bool, bool, bool]],
) -> None:
    shedder = _overloaded()
    for late, cut, calm in outcomes:
        before = shedder.pressure
        shedder.answered(11.0 if calm else 10.05, late=late, cut=cut)
        assert 0.0 <= shedder.pressure <= 1.0
        if calm:
            assert shedder.pressure == before
        else:
            assert (shedder.pressure >= before) if late or cut else (shedder.pressure <= before)
        assert shedder.stay_s == pytest.approx(0.004 - shedder.pressure * 0.003)


def test_the_low_bound_must_not_exceed_the_high_one() -> None:
    with pytest.raises(ValueError, match="stay_s <= enter_s"):
        LagShedder(enter_s=0.001, stay_s=0.002, calm_s=0.1)


# --- InFlightGate ---------------------------------------------------------------------


def test_the_gate_admits_up_to_its_limit_and_refuses_the_next() -> None:
    gate = InFlightGate(2)
    assert [gate.enter(), gate.enter(), gate.enter()] == [True, True, False]
    assert gate.inside == 2


def test_leaving_the_gate_frees_a_place() -> None:
    gate = InFlightGate(1)
    gate.enter()
    gate.leave()
    assert gate.enter()


def test_leaving_without_entering_is_a_bug() -> None:
    with pytest.raises(RuntimeError, match="without a matching enter"):
        InFlightGate(1).leave()


def test_a_gate_holds_at_least_one() -> None:
    with pytest.raises(ValueError, match="limit"):
        InFlightGate(0)


# --- settings -------------------------------------------------------------------------


def test_the_lag_bound_defaults_to_half_the_deadline() -> None:
    assert Settings(deadline_ms=8.0).shed_lag_s == pytest.approx(0.004)


def test_a_lag_bound_past_the_deadline_is_refused() -> None:
    with pytest.raises(SettingsError, match="--shed-lag-ms"):
        Settings(deadline_ms=8.0, shed_lag_ms=9.0).validate()


def test_a_stay_bound_past_the_lag_bound_is_refused() -> None:
    with pytest.raises(SettingsError, match="--shed-stay-lag-ms"):
        Settings(deadline_ms=8.0, shed_lag_ms=2.0, shed_stay_lag_ms=3.0).validate()


def test_an_in_flight_bound_below_one_is_refused() -> None:
    with pytest.raises(SettingsError, match="--max-in-flight"):
        Settings(max_in_flight=0).validate()


def test_the_overloaded_reason_is_a_technical_error_code() -> None:
    assert (NoBid.OVERLOADED.value, NoBid.OVERLOADED.nbr) == ("overloaded", 1)


# --- live -----------------------------------------------------------------------------


class StallOnce:
    """The first request holds the whole event loop until ``release``, then ``stall_s``."""

    def __init__(self, stall_s: float):
        self.entered, self.release = threading.Event(), threading.Event()
        self._stall_s = stall_s
        self._done = False

    async def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        if not self._done:
            self._done = True
            self.entered.set()
            self.release.wait(WAIT_S)
            time.sleep(self._stall_s)  # noqa: ASYNC251 - blocking the loop is the point
        return None


class HoldOnce:
    """The first request keeps its in-flight place (awaiting) until ``release``."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self._done = False

    async def __call__(self, ctx: Context, deadline: float) -> NoBid | None:
        if not self._done:
            self._done = True
            self.entered.set()
            while not self.release.is_set():  # noqa: ASYNC110 - set from another thread
                await asyncio.sleep(0.001)
        return None


def _with(*extra: Stage) -> StagesHook:
    def hook(state: BidderState) -> Sequence[Stage]:
        return [*extra, *state.stages]  # first: every request reaches them

    return hook


@contextlib.contextmanager
def _live(settings: Settings, *stages: Stage) -> Iterator[LiveBidder]:
    with LiveBidder(
        settings.replace(port=held_port(), admin_port=0), stages=_with(*stages)
    ) as bidder:
        yield bidder


def _in_thread(bidder: LiveBidder) -> tuple[threading.Thread, list[Answer]]:
    answers: list[Answer] = []
    thread = threading.Thread(target=lambda: answers.append(bidder.post(SIMPLE_BANNER)))
    thread.start()
    return thread, answers


def _send(bidder: LiveBidder) -> http.client.HTTPConnection:
    """Write a bid request without reading the answer (it queues behind a stall)."""
    conn = http.client.HTTPConnection(bidder.settings.host, bidder.settings.port, timeout=WAIT_S)
    conn.request("POST", "/openrtb2/bid", SIMPLE_BANNER, {"Content-Type": "application/json"})
    return conn


def _reason(conn: http.client.HTTPConnection) -> tuple[int, str | None]:
    try:
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader("X-Nbr-Reason")
    finally:
        conn.close()


def _recovers(bidder: LiveBidder) -> bool:
    """A request is answered other than ``overloaded`` (bounded number of tries)."""
    for _ in range(200):
        if bidder.post(SIMPLE_BANNER).reason != NoBid.OVERLOADED.value:
            return True
        time.sleep(0.01)  # the probe only catches up while the loop runs
    return False


def _stall_shed_recover(bidder: LiveBidder, stall: StallOnce) -> None:
    """A request stalls the loop; one queued behind it is shed; the bidder recovers."""
    first, _ = _in_thread(bidder)
    assert stall.entered.wait(WAIT_S)
    queued = _send(bidder)
    stall.release.set()
    assert _reason(queued) == (204, "overloaded")
    first.join(WAIT_S)
    assert _recovers(bidder)


def test_requests_queued_behind_a_stalled_loop_are_shed_then_the_bidder_recovers(
    bidder_settings: Settings,
) -> None:
    stall = StallOnce(stall_s=bidder_settings.shed_lag_s * 2)
    with _live(bidder_settings, stall) as bidder:
        _stall_shed_recover(bidder, stall)


def test_a_request_admitted_while_the_worker_sheds_gets_the_overload_margin_too(
    bidder_settings: Settings,
) -> None:
    # A calm window far longer than the test: once it has shed, the worker stays
    # "overloaded" and admits only at lags under the stay bound.
    settings = bidder_settings.replace(shed_calm_ms=60_000.0)
    stall, probe = StallOnce(stall_s=settings.shed_lag_s * 2), DeadlineProbe()
    with _live(settings, stall, probe) as bidder:
        _stall_shed_recover(bidder, stall)
    margins_ms = settings.answer_margin_ms + settings.overload_margin_ms
    assert settings.overload_margin_ms > 0
    assert probe.budgets_s[-1] == pytest.approx((settings.deadline_ms - margins_ms) / 1000)


def test_a_request_past_the_in_flight_bound_is_shed_at_once(bidder_settings: Settings) -> None:
    hold = HoldOnce()
    with _live(bidder_settings.replace(max_in_flight=1, deadline_ms=1000.0), hold) as bidder:
        first, answers = _in_thread(bidder)
        assert hold.entered.wait(WAIT_S)
        assert _reason(_send(bidder)) == (204, "overloaded")
        hold.release.set()
        first.join(WAIT_S)
        assert answers[0].reason != "overloaded"
        assert bidder.post(SIMPLE_BANNER).reason != "overloaded"
