"""Requests the bidder shed for its own load, over a replay and by simulated hour.

A request shed for load (``SHED``) is supply no campaign saw. On a live day the offline
simulator's supply is the ``--supply-from`` replay's, so where the live day shed more
than that replay, live met less supply than the simulator counts on; where that
happens in a few hours, those hours fall under their targets and the next ones catch
up, out of the ±10% band both. The report names those hours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bidder.replay.hourly_shares import hourly_shares, widest_hours
from pacing.curves import hour_of_day

SHED = ("overloaded", "deadline")
"""No-bid reasons of requests the bidder refused for its own load, not for a campaign."""
SHED_GAP = 0.02
"""How far (share of the hour's requests) live's shed share must exceed the
``--supply-from`` replay's for the report to name the hour."""
MIN_HOUR_REQUESTS = 100
"""Fewer requests in an hour than this on either side leave its share noise."""


@dataclass(slots=True)
class ShedTally:
    """Measured requests and those shed for load, per simulated UTC hour of ``ts``."""

    requests: list[int] = field(default_factory=lambda: [0] * 24)
    shed: list[int] = field(default_factory=lambda: [0] * 24)

    def see(self, ts: int) -> None:
        self.requests[hour_of_day(ts)] += 1

    def answer(self, reason: str | None, ts: int) -> None:
        if reason in SHED:
            self.shed[hour_of_day(ts)] += 1

    def json(self) -> dict[str, list[int]]:
        return {"requests": list(self.requests), "shed": list(self.shed)}


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
    "MIN_HOUR_REQUESTS",
    "SHED",
    "SHED_GAP",
    "ShedTally",
    "hourly_shed_shares",
    "hours_shed_above",
    "render_shed",
    "shed_section",
    "shed_share",
]
