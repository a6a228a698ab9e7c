"""Target curves: how a daily budget is spread over the 24 hours of a UTC day.

A curve is 24 non-negative hourly weights (not all zero), in proportion to the
supply expected in each hour. The target cumulative spend at an instant is the
budget times the curve's cumulative share up to that instant, linear inside an
hour, so the target reaches the whole budget at 24:00.

Timezone policy: every curve and every budget day is in UTC. Hour 0 is 00:00-01:00
UTC, the pacing day is the UTC calendar day of the clock's ``wall_ms`` (and of a
bidstream's ``ts``). A campaign that thinks in local time supplies a curve rotated
to UTC; there is no per-campaign timezone.

Curves come from the built-in ``standard`` curve (also named ``default``), from a
JSON file (``{"weights": [24 numbers]}`` or a bare array), from a recorded bidstream
(requests counted per UTC hour of ``ts``), or from a campaign's own 24 weights.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bidder.bidstream.stream import read_stream

DAY_S = 86_400
HOUR_S = 3_600
DAY_MS = DAY_S * 1000

STANDARD_WEIGHTS: tuple[float, ...] = (
    2.6, 1.9, 1.45, 1.2, 1.1, 1.2, 1.6, 2.3, 2.9, 3.2, 3.4, 3.5,
    3.6, 3.5, 3.4, 3.4, 3.5, 3.8, 4.1, 4.3, 4.4, 4.2, 3.7, 3.1,
)  # fmt: skip
"""The built-in curve: trough 04:00, peak 20:00 UTC, peak/trough 4.0 (day supply 3-5x
night). The same shape as the bidstream generator's diurnal supply (docs/bidstream.md)."""


class CurveError(ValueError):
    """A curve is invalid or cannot be read; the message names the source and problem."""


@dataclass(frozen=True, slots=True)
class Curve:
    """24 hourly weights and the cumulative shares derived from them."""

    weights: tuple[float, ...]
    cum: tuple[float, ...]
    """cum[h]: share of the day's budget due by the start of hour h (cum[24] == 1)."""

    @classmethod
    def from_weights(cls, weights: Iterable[float], source: str = "curve") -> Curve:
        values = tuple(float(w) for w in weights)
        if len(values) != 24:
            raise CurveError(f"{source}: a curve needs 24 hourly weights, got {len(values)}")
        if any(not (w >= 0.0 and w < float("inf")) for w in values):
            raise CurveError(f"{source}: weights must be finite non-negative numbers")
        total = sum(values)
        if total <= 0:
            raise CurveError(f"{source}: the 24 hourly weights must not all be zero")
        cum, running = [0.0], 0.0
        for w in values:
            running += w
            cum.append(running / total)
        cum[-1] = 1.0
        return cls(values, tuple(cum))

    def share_at(self, second_of_day: float) -> float:
        """Share of the daily budget due by ``second_of_day`` (0..86400), in [0, 1]."""
        if second_of_day <= 0:
            return 0.0
        if second_of_day >= DAY_S:
            return 1.0
        hour = int(second_of_day // HOUR_S)
        frac = (second_of_day - hour * HOUR_S) / HOUR_S
        return self.cum[hour] + frac * (self.cum[hour + 1] - self.cum[hour])

    def target_micros(self, budget_micros: int, second_of_day: float) -> int:
        """Target cumulative spend (integer micros, rounded down) at ``second_of_day``."""
        return int(budget_micros * self.share_at(second_of_day))

    def hour_share(self, hour: int) -> float:
        return self.cum[hour + 1] - self.cum[hour]

    def second_reaching(self, share: float) -> float:
        """The first second of the day at which the cumulative share reaches ``share``."""
        hour = min(max(bisect.bisect_left(self.cum, share) - 1, 0), 23)
        width = self.hour_share(hour)
        frac = 0.0 if width <= 0 else (share - self.cum[hour]) / width
        return (hour + min(max(frac, 0.0), 1.0)) * HOUR_S

    def to_doc(self, name: str | None = None) -> dict[str, object]:
        doc: dict[str, object] = {"weights": list(self.weights)}
        if name:
            doc["name"] = name
        return doc


STANDARD = Curve.from_weights(STANDARD_WEIGHTS, "standard")
BUILTIN: Mapping[str, Curve] = {"default": STANDARD, "standard": STANDARD}


def second_of_day(wall_ms: int) -> float:
    """Seconds since 00:00 UTC of the day ``wall_ms`` falls in."""
    return (wall_ms % DAY_MS) / 1000.0


def hour_of_day(wall_ms: int) -> int:
    """The UTC hour (0-23) of ``wall_ms``."""
    return int(second_of_day(wall_ms) // HOUR_S)


def day_of(wall_ms: int) -> int:
    """The UTC day number (days since the epoch) of ``wall_ms``."""
    return wall_ms // DAY_MS


def read_json_file(path: str | os.PathLike[str], error: type[ValueError]) -> Any:
    """A JSON file's document; ``error`` names the file and why it cannot be read."""
    source = str(path)
    try:
        return orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise error(f"{source}: file not found") from None
    except OSError as exc:
        raise error(f"{source}: cannot read ({exc.strerror or exc})") from None
    except orjson.JSONDecodeError as exc:
        raise error(f"{source}: not valid JSON ({exc})") from None


def load_curve_file(path: str | os.PathLike[str]) -> Curve:
    """A curve from JSON: ``{"weights": [...24]}`` or a bare array of 24 numbers."""
    source = str(path)
    doc = read_json_file(path, CurveError)
    weights = doc.get("weights") if isinstance(doc, dict) else doc
    if not isinstance(weights, list) or not all(_is_number(w) for w in weights):
        raise CurveError(f'{source}: expected {{"weights": [24 numbers]}} or an array of 24')
    return Curve.from_weights(weights, source)


def curve_from_stream(path: str | os.PathLike[str]) -> tuple[Curve, list[int]]:
    """A curve from a recorded bidstream: requests per UTC hour of ``ts``.

    Returns the curve and the 24 request counts. Every hour must have traffic: an
    hour missing from the recording is unknown supply, not zero supply.
    """
    counts = [0] * 24
    for record in read_stream(Path(path)):
        counts[hour_of_day(record.ts)] += 1
    missing = [h for h, n in enumerate(counts) if n == 0]
    if missing:
        raise CurveError(
            f"{path}: no requests in UTC hour(s) {', '.join(map(str, missing))}; "
            "a curve needs a recording that covers all 24 hours"
        )
    return Curve.from_weights(counts, str(path)), counts


def resolve_curve(spec: str | tuple[float, ...], named: Mapping[str, Curve] = BUILTIN) -> Curve:
    """A campaign's ``pacing_curve``: a name (built-in or ``named``) or 24 weights."""
    if isinstance(spec, str):
        curve = named.get(spec) or BUILTIN.get(spec)
        if curve is None:
            raise CurveError(f"unknown pacing curve {spec!r}")
        return curve
    return Curve.from_weights(spec, "pacing_curve")


def load_curve_dir(path: str | os.PathLike[str]) -> dict[str, Curve]:
    """Named curves from a directory: each ``NAME.json`` is the curve ``NAME``."""
    folder = Path(path)
    if not folder.is_dir():
        raise CurveError(f"{folder}: not a directory of curve files")
    return {p.stem: load_curve_file(p) for p in sorted(folder.glob("*.json"))}


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
