"""The pacing settings file: what ``bidsim pacing tune --out`` chose, for the live reconciler.

Layout (JSON)::

    {"format": "bidsim-pacing/1",
     "kp": 0.03, "ki": 0.001, "kd": 0.0,
     "chunk_periods_per_day": 288,
     "curve": {"name": "standard", "weights": [24 numbers]},
     "tuned": {...}}                        # optional: how tune scored the choice

``kp``, ``ki``, ``kd`` and ``chunk_periods_per_day`` replace the reconciler's defaults;
``curve`` becomes the curve of every campaign whose ``pacing_curve`` is ``default``
(campaigns naming another curve or giving their own weights keep theirs). ``tuned`` is
carried along for the reports and not read back. Every problem names the file and the
field, all at once.

The chunk has one value per run: the file's ``chunk_periods_per_day``, or else the
``--chunk-periods`` option, or else the default. Giving both is an error
(``chunk_conflict``), not a silent choice: a tuned file and a hand-set chunk disagree
about what was tuned.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any

from pacing.curves import Curve, CurveError, read_json_file
from pacing.lease import DEFAULT_CHUNK_PERIODS
from pacing.pid import PidGains
from pacing.reconcile import PacingConfig

FORMAT = "bidsim-pacing/1"
MAX_CHUNK_PERIODS = 86_400
"""The finest chunk the options take: one period a second."""
CURVE_NAME = "default"
"""The campaign curve name the file's curve takes over."""


class PacingFileError(ValueError):
    """The settings file cannot be used; the message names the file and every bad field."""


@dataclass(frozen=True, slots=True)
class PacingFile:
    gains: PidGains
    chunk_periods_per_day: int
    curve: Curve
    curve_name: str
    source: str

    def apply(self, config: PacingConfig) -> PacingConfig:
        return replace(config, gains=self.gains, chunk_periods_per_day=self.chunk_periods_per_day)

    def curves(self) -> dict[str, Curve]:
        return {CURVE_NAME: self.curve}

    def summary(self) -> dict[str, Any]:
        """What a report shows of the settings a run used."""
        return {
            "source": self.source,
            "kp": self.gains.kp,
            "ki": self.gains.ki,
            "kd": self.gains.kd,
            "chunk_periods_per_day": self.chunk_periods_per_day,
            "curve": self.curve_name,
        }


def chunk_conflict(chunk_periods: int | None, path: object) -> str | None:
    """Why ``--chunk-periods`` and ``--pacing-config`` cannot both be given; None if fine."""
    if chunk_periods is None or path is None:
        return None
    return (
        f"--chunk-periods {chunk_periods} and --pacing-config {path}: give one, not both"
        " (the file sets the chunk: its chunk_periods_per_day)"
    )


def pacing_problems(chunk_periods: int | None, path: str | os.PathLike[str] | None) -> list[str]:
    """What is wrong with a run's ``--chunk-periods`` and ``--pacing-config``, by option."""
    if chunk_periods is not None and not 1 <= chunk_periods <= MAX_CHUNK_PERIODS:
        return [f"--chunk-periods must be 1-{MAX_CHUNK_PERIODS}"]
    conflict = chunk_conflict(chunk_periods, path)
    if conflict is not None:
        return [conflict]
    if path is None:
        return []
    try:
        load_pacing_file(path)
    except PacingFileError as exc:
        return [f"--pacing-config: {exc}"]
    return []


def chunk_periods_in_force(chunk_periods: int | None, path: str | os.PathLike[str] | None) -> int:
    """The lease chunk's periods per day: the file's, ``--chunk-periods``, or the default.

    Raises PacingFileError when both are given or the file is bad.
    """
    conflict = chunk_conflict(chunk_periods, path)
    if conflict is not None:
        raise PacingFileError(conflict)
    if path is not None:
        return load_pacing_file(path).chunk_periods_per_day
    return DEFAULT_CHUNK_PERIODS if chunk_periods is None else chunk_periods


def settings_in_force(
    path: str | os.PathLike[str] | None, tick_s: float, chunk_periods: int | None = None
) -> dict[str, Any]:
    """The reconciler's pacing settings given its ``--pacing-config`` and ``--chunk-periods``
    (None: the defaults)."""
    if path is not None:
        chunk_periods_in_force(chunk_periods, path)  # both given: PacingFileError
        return {**load_pacing_file(path).summary(), "tick_s": tick_s}
    defaults = PacingConfig()
    return {
        "source": "built-in defaults"
        + ("" if chunk_periods is None else f", --chunk-periods {chunk_periods}"),
        "kp": defaults.gains.kp,
        "ki": defaults.gains.ki,
        "kd": defaults.gains.kd,
        "chunk_periods_per_day": chunk_periods_in_force(chunk_periods, None),
        "curve": "standard",
        "tick_s": tick_s,
    }


def settings_line(summary: dict[str, Any]) -> str:
    """One terminal line for a report."""
    return (
        f"pacing: kp {summary['kp']:g}, ki {summary['ki']:g}/s, kd {summary['kd']:g} s,"
        f" chunk budget/nodes/{summary['chunk_periods_per_day']}, default curve"
        f" {summary['curve']}, tick {summary['tick_s']:g} s ({summary['source']})"
    )


def pacing_doc(
    gains: PidGains, periods: int, curve: Curve, curve_name: str, tuned: dict[str, Any]
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "kp": gains.kp,
        "ki": gains.ki,
        "kd": gains.kd,
        "chunk_periods_per_day": periods,
        "curve": {"name": curve_name, "weights": list(curve.weights)},
        "tuned": tuned,
    }


def load_pacing_file(path: str | os.PathLike[str]) -> PacingFile:
    """Read and check a settings file; PacingFileError names the file and each bad field."""
    source = str(path)
    doc = read_json_file(path, PacingFileError)
    if not isinstance(doc, dict):
        raise PacingFileError(f"{source}: expected a JSON object (bidsim pacing tune --out)")
    problems: list[str] = []
    if doc.get("format") != FORMAT:
        problems.append(f"field format: expected {FORMAT!r}, got {doc.get('format')!r}")
    kp, ki, kd = (_gain(doc, name, problems) for name in ("kp", "ki", "kd"))
    periods = doc.get("chunk_periods_per_day")
    if not isinstance(periods, int) or isinstance(periods, bool) or periods < 1:
        problems.append(f"field chunk_periods_per_day: expected an integer >= 1, got {periods!r}")
    curve, name = _curve(doc.get("curve"), problems)
    if problems or curve is None or not isinstance(periods, int):
        raise PacingFileError(f"{source}: " + "; ".join(problems))
    return PacingFile(PidGains(kp, ki, kd), periods, curve, name, source)


def _gain(doc: dict[str, Any], name: str, problems: list[str]) -> float:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.append(f"field {name}: expected a number, got {value!r}")
        return 0.0
    if not (math.isfinite(value) and value >= 0):
        problems.append(f"field {name}: must be a finite number >= 0, got {value!r}")
        return 0.0
    return float(value)


def _curve(value: object, problems: list[str]) -> tuple[Curve | None, str]:
    if not isinstance(value, dict) or not isinstance(value.get("weights"), list):
        problems.append('field curve: expected {"name": ..., "weights": [24 numbers]}')
        return None, ""
    weights = value["weights"]
    if not all(isinstance(w, int | float) and not isinstance(w, bool) for w in weights):
        problems.append("field curve.weights: expected 24 numbers")
        return None, ""
    try:
        curve = Curve.from_weights(weights, "field curve.weights")
    except CurveError as exc:
        problems.append(str(exc))
        return None, ""
    return curve, str(value.get("name") or "tuned")


__all__ = [
    "FORMAT",
    "PacingFile",
    "PacingFileError",
    "chunk_conflict",
    "chunk_periods_in_force",
    "load_pacing_file",
    "pacing_doc",
    "pacing_problems",
    "settings_in_force",
    "settings_line",
]
