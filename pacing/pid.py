"""A PID controller with a clamped output, anti-windup and derivative on measurement.

One class runs in the reconciler and in the offline simulator. Time is injected: each
``update`` gets the measurement and ``dt`` (seconds since the previous update), so the
caller's clock (real, manual or simulated) is the only time source.

- Derivative on measurement: the D term uses -d(measurement)/dt, not d(error)/dt, so a
  setpoint change does not kick the output.
- Anti-windup by clamping the integral: after each step the integral is limited to the
  range that keeps ``P + I + D`` inside the output limits, so a saturated controller
  does not bank error it would later have to unwind.
- The integral starts at ``initial`` (the output before any error has been seen).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PidGains:
    kp: float
    ki: float
    """Per second."""
    kd: float
    """Seconds."""
    out_min: float = 0.0
    out_max: float = 1.0

    def __post_init__(self) -> None:
        if not self.out_min < self.out_max:
            raise ValueError(f"out_min {self.out_min} must be below out_max {self.out_max}")
        if min(self.kp, self.ki, self.kd) < 0:
            raise ValueError("PID gains must be non-negative")


class Pid:
    __slots__ = ("_last", "gains", "integral", "output", "setpoint")

    def __init__(self, gains: PidGains, setpoint: float = 0.0, initial: float = 0.0) -> None:
        self.gains = gains
        self.setpoint = setpoint
        self.integral = _clamp(initial, gains.out_min, gains.out_max)
        self.output = self.integral
        self._last: float | None = None

    def update(self, measurement: float, dt: float) -> float:
        """One control step; returns the new output in [out_min, out_max]."""
        g = self.gains
        error = self.setpoint - measurement
        p = g.kp * error
        d = 0.0
        if self._last is not None and dt > 0:
            d = -g.kd * (measurement - self._last) / dt
        self._last = measurement
        if dt > 0:
            self.integral += g.ki * error * dt
        self.integral = _clamp(self.integral, g.out_min - p - d, g.out_max - p - d)
        self.output = _clamp(p + self.integral + d, g.out_min, g.out_max)
        return self.output


def _clamp(value: float, low: float, high: float) -> float:
    return low if value < low else high if value > high else value
