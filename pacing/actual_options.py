"""Command-line options for the actual day of ``bidsim pacing simulate`` and ``tune``.

``--scenario NAME`` (repeatable, or ``all``) picks named forecast-error scenarios; the
transform options describe one more day of the user's own, named ``custom``. The target
curve (``--curve``) is the forecast; ``--stream`` gives the actual supply its shape.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from pacing.actual import SCENARIOS, Actual
from pacing.curves import CurveError

CUSTOM = "custom"
OPTION = {
    "scale": "--supply-scale", "drop_hours": "--drop", "drop_keep": "--drop",
    "price_from_hour": "--price-shift", "price_factor": "--price-shift",
}  # fmt: skip


def add_actual_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the actual day (when it is not the forecast)")
    g.add_argument(
        "--scenario", action="append", default=[], choices=[*SCENARIOS, "all"], metavar="NAME",
        help=f"a named forecast-error day (repeatable): {', '.join(SCENARIOS)} or all",
    )  # fmt: skip
    g.add_argument("--shift-hours", type=int, default=0, help="supply comes N hours late")
    g.add_argument("--supply-scale", type=float, default=1.0, help="the day's supply times F")
    g.add_argument(
        "--drop", metavar="FIRST-END:KEEP",
        help="only KEEP (0-1) of the supply in UTC hours FIRST..END-1, e.g. 14-16:0.5",
    )  # fmt: skip
    g.add_argument(
        "--price-shift", metavar="HOUR:FACTOR",
        help="median clearing price times FACTOR from UTC HOUR on, e.g. 12:1.5",
    )  # fmt: skip


def actuals_from_args(args: argparse.Namespace) -> dict[str, Actual]:
    """The days the options ask for, by name; empty when none (the forecast day alone)."""
    names = list(SCENARIOS) if "all" in args.scenario else list(dict.fromkeys(args.scenario))
    days = {name: SCENARIOS[name] for name in names}
    custom = _price(
        args.price_shift,
        _drop(args.drop, Actual(shift_hours=args.shift_hours, scale=args.supply_scale)),
    )
    if custom != Actual():
        problems = custom.problems()
        if problems:
            raise CurveError("; ".join(f"{OPTION[f]}: {m}" for f, m in problems))
        days[CUSTOM] = custom
    return days


def _drop(spec: str | None, day: Actual) -> Actual:
    if spec is None:
        return day
    try:
        hours, keep = spec.split(":")
        first, end = hours.split("-")
        return replace(day, drop_hours=(int(first), int(end)), drop_keep=float(keep))
    except ValueError:
        raise CurveError(f"--drop: expected FIRST-END:KEEP, e.g. 14-16:0.5, got {spec!r}") from None


def _price(spec: str | None, day: Actual) -> Actual:
    if spec is None:
        return day
    try:
        hour, factor = spec.split(":")
        return replace(day, price_from_hour=int(hour), price_factor=float(factor))
    except ValueError:
        raise CurveError(
            f"--price-shift: expected HOUR:FACTOR, e.g. 12:1.5, got {spec!r}"
        ) from None


__all__ = ["CUSTOM", "actuals_from_args", "add_actual_options"]
