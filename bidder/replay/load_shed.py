"""Requests the bidder shed for its own load, over a replay, by simulated hour and minute.

A request shed for load (``SHED``) is supply no campaign saw. On a live day the offline
simulator's supply is the ``--supply-from`` replay's, so where the live day shed more
than that replay, live met less supply than the simulator counts on; where that
happens in a few hours, those hours fall under their targets and the next ones catch
up, out of the ±10% band both. The report names those hours. The bidder sheds in
bursts as short as the stalls that cause them, and a burst of some simulated minutes
takes an hour out of band where the same loss spread over the hour would not: so the
tally is kept per minute too, and ``admission`` hands the offline days the supply live
let through (``bidder.replay.pacing_figures.admitted_figures``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bidder.replay.hourly_shares import hourly_shares, widest_hours
from pacing.curves import second_of_day

SHED = ("overloaded", "deadline")
"""No-bid reasons of requests the bidder refused for its own load, not for a campaign."""
SHED_GAP = 0.02
"""How far (share of the hour's requests) live's shed share must exceed the
``--supply-from`` replay's for the report to name the hour."""
MIN_HOUR_REQUESTS = 100
"""Fewer requests in an hour than this on either side leave its share noise."""


MINUTES = 24 * 60


@dataclass(slots=True)
class ShedTally:
    """Measured requests and those shed for load, per simulated UTC minute of ``ts``."""

    requests: list[int] = field(default_factory=lambda: [0] * MINUTES)
    shed: list[int] = field(default_factory=lambda: [0] * MINUTES)

    def see(self, ts: int) -> None:
        self.requests[_minute(ts)] += 1

    def answer(self, reason: str | None, ts: int) -> None:
        if reason in SHED:
            self.shed[_minute(ts)] += 1

    def json(self) -> dict[str, dict[str, list[int]]]:
        """The report's ``load_shed_by_hour`` and ``load_shed_by_minute``."""
        by_minute = {"requests": list(self.requests), "shed": list(self.shed)}
        by_hour = {
            key: [sum(counts[h * 60 : h * 60 + 60]) for h in range(24)]
            for key, counts in by_minute.items()
        }
        return {"load_shed_by_hour": by_hour, "load_shed_by_minute": by_minute}


def _minute(ts: int) -> int:
    return int(second_of_day(ts) // 60)


def shed_share(report: Mapping[str, Any]) -> float | None:
    """The share of a replay's requests the bidder shed for load (``SHED``). Live and
    calibration replays shed differently on a busy machine, and the simulator's supply
    is the calibration's."""
    requests, reasons = report.get("requests"), report.get("nbr_reasons") or {}
    if not requests:
        return None
    return round(sum(reasons.get(reason, 0) for reason in SHED) / requests, 4)


def hourly_shed_shares(report: Mapping[str, Any]) -> list[float | None] | None:
    """Each simulated hour's shed share (None under ``MIN_HOUR_REQUESTS``); None for a
    report without the hourly counts (``load_shed_by_hour``)."""
    by_hour = report.get("load_shed_by_hour")
    if not by_hour:
        return None
    return hourly_shares(by_hour["shed"], by_hour["requests"], MIN_HOUR_REQUESTS)


def hours_shed_above(
    live: Sequence[float | None] | None, calibration: Sequence[float | None] | None
) -> list[dict[str, float]] | None:
    """The hours where live shed the most above the calibration, by more than
    ``SHED_GAP`` (``widest_hours``): ``{hour, live, calibration}``."""
    if live is None or calibration is None:
        return None
    return [
        {"hour": hour, "live": round(mine, 4), "calibration": round(theirs, 4)}
        for hour, mine, theirs in widest_hours(live, calibration, SHED_GAP)
    ]


def shed_section(live: Mapping[str, Any], calibration: Mapping[str, Any] | None) -> dict[str, Any]:
    """The report's ``pacing_day_shed``."""
    calibration = calibration or {}
    return {
        "live": shed_share(live),
        "calibration": shed_share(calibration),
        "hours_above_calibration": hours_shed_above(
            hourly_shed_shares(live), hourly_shed_shares(calibration)
        ),
    }


@dataclass(frozen=True, slots=True)
class Admission:
    """The supply a live day's bidder let through, for the offline days beside it."""

    minutes: tuple[float, ...]
    """The share of each simulated minute's requests it did not shed for load (1 in a
    minute without requests): a stall sheds a burst, which hurts the band more than
    the same loss spread over the hour."""
    unshed: tuple[float, ...]
    """Per hour, what the ``--supply-from`` replay's supply is multiplied by to put back
    what that replay shed itself: 1 / (1 - its shed share of the hour)."""


def admission(live: Mapping[str, Any], calibration: Mapping[str, Any] | None) -> Admission | None:
    """What ``live`` let through (``load_shed_by_minute``); None for a report without the
    counts. The calibration's hours without a share take its share over the day."""
    by_minute = live.get("load_shed_by_minute")
    if not by_minute:
        return None
    minutes = tuple(
        1.0 - shed / requests if requests else 1.0
        for requests, shed in zip(by_minute["requests"], by_minute["shed"], strict=True)
    )
    calibration = calibration or {}
    overall = shed_share(calibration) or 0.0
    hourly = hourly_shed_shares(calibration) or [None] * 24
    shares = [overall if share is None else share for share in hourly]
    # An hour it shed whole left no supply to scale: nothing to put back there.
    unshed = tuple(1.0 / (1.0 - share) if share < 1.0 else 1.0 for share in shares)
    return Admission(minutes, unshed)


def render_shed(shed: Mapping[str, Any]) -> str:
    live, calibration = shed.get("live"), shed.get("calibration")
    if live is None or calibration is None:
        return "  load shed (overloaded, deadline): unknown without --supply-from"
    line = f"  load shed (overloaded, deadline): live {live:.1%}, calibration {calibration:.1%}"
    if live > calibration + 0.01:
        line += ": live lost supply the simulator counts on, so it spends less"
    elif calibration > live + 0.01:
        line += ": the simulator's supply is short of what live met"
    hours = shed.get("hours_above_calibration")
    if hours:
        named = ", ".join(
            f"{h['hour']:02d}:00 {h['live']:.1%} against {h['calibration']:.1%}" for h in hours
        )
        line += (
            f"\n    hours in which live shed more (their targets go under, the next hours"
            f" catch up): {named}"
        )
    return line


__all__ = [
    "MINUTES",
    "MIN_HOUR_REQUESTS",
    "SHED",
    "SHED_GAP",
    "Admission",
    "ShedTally",
    "admission",
    "hourly_shed_shares",
    "hours_shed_above",
    "render_shed",
    "shed_section",
    "shed_share",
]
