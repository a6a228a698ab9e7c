"""P(win | bid, floor): a logistic win-rate curve per floor band, learnt from outcomes.

Competition for an impression rises with its floor (the publisher prices what it
knows), so the context is the floor. Each band of floors (no floor; up to 0.5; up to
2; above 2 USD CPM) has its own logistic curve in log-price::

    P(win | b) = sigmoid(a + beta ln(b) + gamma ln(max(floor, 0.01)))     (b, floor in CPM)

fitted by Newton's method (IRLS) on (bid, floor, won) triples with a little ridge
on beta and gamma (the no-floor band's ln(floor) is constant). A band with too few
samples, or whose fitted curve does not rise with the bid, uses the all-bands curve.
For a given floor the curve is sigmoid(alpha + beta ln b): ``curve(floor)`` gives
(alpha, beta), which is all first-price shading needs (``models.price``). A bid below
the floor never wins. Pure numpy; no I/O.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

BAND_EDGES_MICROS = (0, 500_000, 2_000_000)
"""Floor band k holds floors in (edge[k-1], edge[k]]; band 0 is 'no floor'."""
MIN_BAND_SAMPLES = 500
_RIDGE = 1e-3
_MIN_FLOOR_CPM = 0.01


@dataclass(frozen=True, slots=True)
class Coefs:
    a: float
    beta: float
    gamma: float


@dataclass(frozen=True, slots=True)
class WinRateModel:
    bands: tuple[Coefs, ...]
    """One curve per band: len(BAND_EDGES_MICROS) + 1."""

    @classmethod
    def fit(
        cls, bids_micros: np.ndarray, floors_micros: np.ndarray, won: np.ndarray
    ) -> WinRateModel:
        """Learn the curves; raises ValueError when the outcomes cannot support a fit."""
        _check(bids_micros, floors_micros, won)
        x = _design(bids_micros, floors_micros)
        overall = _fit_logistic(x, won)
        if overall is None or overall.beta <= 0:
            raise ValueError("win outcomes do not show wins rising with the bid")
        band_of = np.array([band(int(f)) for f in floors_micros])
        curves: list[Coefs] = []
        for k in range(len(BAND_EDGES_MICROS) + 1):
            mask = band_of == k
            fitted = _fit_logistic(x[mask], won[mask]) if mask.sum() >= MIN_BAND_SAMPLES else None
            curves.append(fitted if fitted is not None and fitted.beta > 0 else overall)
        return cls(tuple(curves))

    def curve(self, floor_micros: int) -> tuple[float, float]:
        """(alpha, beta): P(win | b CPM) = sigmoid(alpha + beta ln b) at this floor."""
        c = self.bands[band(floor_micros)]
        return c.a + c.gamma * math.log(max(floor_micros / 1e6, _MIN_FLOOR_CPM)), c.beta

    def p_win(self, bid_micros: int, floor_micros: int) -> float:
        if bid_micros < floor_micros or bid_micros <= 0:
            return 0.0
        alpha, beta = self.curve(floor_micros)
        return _sigmoid(alpha + beta * math.log(bid_micros / 1e6))

    def to_doc(self) -> dict[str, Any]:
        return {
            "band_edges_micros": list(BAND_EDGES_MICROS),
            "bands": [[c.a, c.beta, c.gamma] for c in self.bands],
        }

    @classmethod
    def from_doc(cls, doc: Any) -> WinRateModel:
        """Rebuild from ``to_doc``; raises ValueError when the document does not fit."""
        if not isinstance(doc, dict) or doc.get("band_edges_micros") != list(BAND_EDGES_MICROS):
            raise ValueError("win-rate model has other floor bands than this code")
        bands = doc.get("bands")
        if not isinstance(bands, list) or len(bands) != len(BAND_EDGES_MICROS) + 1:
            raise ValueError("win-rate model needs one curve per floor band")
        try:
            curves = tuple(Coefs(*(float(v) for v in b)) for b in bands)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"win-rate curve is not three numbers: {exc}") from None
        if not all(math.isfinite(c.a + c.beta + c.gamma) and c.beta > 0 for c in curves):
            raise ValueError("win-rate curves must be finite and rise with the bid")
        return cls(curves)


def band(floor_micros: int) -> int:
    return 0 if floor_micros <= 0 else bisect.bisect_left(BAND_EDGES_MICROS, floor_micros)


def _check(bids: np.ndarray, floors: np.ndarray, won: np.ndarray) -> None:
    if not (len(bids) == len(floors) == len(won)):
        raise ValueError("bids, floors and outcomes differ in length")
    if len(bids) < MIN_BAND_SAMPLES:
        raise ValueError(f"need at least {MIN_BAND_SAMPLES} outcomes, got {len(bids)}")
    if np.any(bids <= 0) or np.any(floors < 0):
        raise ValueError("bids must be positive and floors non-negative")
    if not 0 < won.mean() < 1:
        raise ValueError("outcomes need both wins and losses")


def _design(bids_micros: np.ndarray, floors_micros: np.ndarray) -> np.ndarray:
    floors = np.maximum(floors_micros / 1e6, _MIN_FLOOR_CPM)
    return np.column_stack([np.ones(len(bids_micros)), np.log(bids_micros / 1e6), np.log(floors)])


def _fit_logistic(x: np.ndarray, y: np.ndarray, iterations: int = 50) -> Coefs | None:
    """Ridge-regularized logistic regression by Newton steps; None if it cannot fit."""
    if len(y) == 0 or not 0 < y.mean() < 1:
        return None
    w = np.zeros(x.shape[1])
    ridge = np.diag([0.0] + [_RIDGE * len(y)] * (x.shape[1] - 1))
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        hessian = x.T @ (x * (p * (1 - p))[:, None]) + ridge
        step = np.linalg.solve(hessian, x.T @ (y - p) - ridge @ w)
        w += step
        if np.max(np.abs(step)) < 1e-9:
            break
    return Coefs(float(w[0]), float(w[1]), float(w[2])) if np.all(np.isfinite(w)) else None


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)
