"""The day as it happened against the day as forecast, and what pacing could achieve in it.

The target curve is a forecast of supply. ``Actual`` describes how the real day differs
from it, as transforms of the supply the simulator draws from: a shape of its own
(another stream), a shift (the peak comes late), a scale (a lighter day), a drop for a
few hours (an outage) and a market price shift from some hour (the same requests buy
fewer, dearer impressions). ``SCENARIOS`` names the four the acceptance figures are
measured on.

``achievable`` is what a perfect pacer could have spent each hour given that supply:
the target hour by hour, capped by what the supply offered at rate 1 in that hour, with
what could not be spent carried forward into the next hours (docs/pacing.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pacing.curves import Curve


@dataclass(frozen=True, slots=True)
class Actual:
    """How the actual supply differs from the forecast (the identity by default)."""

    shape: Curve | None = None
    """The actual supply's shape (e.g. another stream's); None: the forecast's own."""
    shift_hours: int = 0
    """Supply arrives this many hours late (negative: early), wrapping around the day."""
    scale: float = 1.0
    """The whole day's supply times this."""
    drop_hours: tuple[int, int] | None = None
    """Hours [first, end) in which only ``drop_keep`` of the supply is there."""
    drop_keep: float = 1.0
    price_from_hour: int | None = None
    """From this hour on the market's median clearing price is times ``price_factor``."""
    price_factor: float = 1.0

    def problems(self) -> list[tuple[str, str]]:
        """(field, what is wrong with it) for every bad field."""
        found = []
        if not self.scale > 0 or not math.isfinite(self.scale):
            found.append(("scale", f"must be above 0, got {self.scale}"))
        if self.drop_hours is not None:
            first, end = self.drop_hours
            if not 0 <= first < end <= 24:
                found.append(("drop_hours", f"need 0 <= first < end <= 24, got {first}-{end}"))
        if not 0 <= self.drop_keep <= 1:
            found.append(("drop_keep", f"must be in 0..1, got {self.drop_keep}"))
        if self.price_from_hour is not None and not 0 <= self.price_from_hour <= 23:
            found.append(("price_from_hour", f"must be in 0..23, got {self.price_from_hour}"))
        if not self.price_factor > 0 or not math.isfinite(self.price_factor):
            found.append(("price_factor", f"must be above 0, got {self.price_factor}"))
        return found

    def volume_share(self, forecast: Curve, hour: int) -> float:
        """Share of the forecast day's requests that arrive in ``hour`` (before scale)."""
        shape = self.shape or forecast
        share = shape.hour_share((hour - self.shift_hours) % 24)
        if self.drop_hours is not None and self.drop_hours[0] <= hour < self.drop_hours[1]:
            share *= self.drop_keep
        return share * self.scale

    def price_shifted(self, hour: int) -> bool:
        return self.price_from_hour is not None and hour >= self.price_from_hour


FORECAST = Actual()
SCENARIOS: dict[str, Actual] = {
    "late-peak": Actual(shift_hours=2),
    "light-day": Actual(scale=0.7),
    "half-outage": Actual(drop_hours=(14, 16), drop_keep=0.5),
    "price-up-noon": Actual(price_from_hour=12, price_factor=1.5),
}
"""Peak two hours late; a 30% lighter day; half the supply gone 14:00-16:00 UTC;
median clearing price +50% from 12:00 UTC."""


def achievable(target: Sequence[int], available: Sequence[float]) -> list[int]:
    """Per hour, the target plus the shortfall so far, capped by what was available."""
    out, carry = [], 0
    for want_now, offered in zip(target, available, strict=True):
        want = want_now + carry
        got = min(want, max(int(offered), 0))
        out.append(got)
        carry = want - got
    return out


__all__ = ["FORECAST", "SCENARIOS", "Actual", "achievable"]
