"""The PID controller: clamping, anti-windup, derivative on measurement."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacing.pid import Pid, PidGains


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=50))
def test_output_stays_within_limits(measurements: list[float]) -> None:
    pid = Pid(PidGains(kp=0.5, ki=0.1, kd=0.2, out_min=0.0, out_max=1.0), initial=0.5)
    for m in measurements:
        assert 0.0 <= pid.update(m, 5.0) <= 1.0


def test_integral_does_not_wind_up_while_saturated() -> None:
    pid = Pid(PidGains(kp=0.0, ki=1.0, kd=0.0), initial=0.5)
    for _ in range(1000):
        pid.update(-100.0, 5.0)  # far under target: output pinned at 1
    # One step over target brings the output off the rail at once.
    assert pid.update(1.0, 5.0) < 1.0


def test_derivative_acts_on_measurement_not_setpoint() -> None:
    pid = Pid(PidGains(kp=0.0, ki=0.0, kd=1.0, out_min=-10, out_max=10), initial=0.0)
    pid.update(0.0, 1.0)
    pid.setpoint = 5.0
    assert pid.update(0.0, 1.0) == 0.0  # no kick from the setpoint change
    assert pid.update(1.0, 1.0) == pytest.approx(-1.0)


def test_integral_removes_a_steady_error() -> None:
    pid = Pid(PidGains(kp=0.1, ki=0.05, kd=0.0, out_min=-10, out_max=10))
    for _ in range(10):
        pid.update(-1.0, 1.0)
    assert pid.output > 0.1 * 1.0 + 0.4


def test_zero_dt_changes_nothing_but_p() -> None:
    pid = Pid(PidGains(kp=0.1, ki=1.0, kd=1.0), initial=0.5)
    assert pid.update(-1.0, 0.0) == pytest.approx(0.6)


def test_invalid_gains_are_refused() -> None:
    with pytest.raises(ValueError):
        PidGains(kp=-1, ki=0, kd=0)
    with pytest.raises(ValueError):
        PidGains(kp=1, ki=0, kd=0, out_min=1, out_max=1)
