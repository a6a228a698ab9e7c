"""The price of a scored candidate: value, cap, floor, and first-price bid shading.

All prices are CPM in integer micros. A scored campaign values an impression at

    value = click value x P(click) x 1000          (a CPM: the price of 1000 impressions)

rounded down, so rounding never bids above what the impression is worth. The bid may
not exceed ``min(value, campaign max bid)`` (the *ceiling*) and may not be below the
impression's floor: when the ceiling is under the floor there is no bid.

Second price (``at=2``, and anything that is not first price): bid the ceiling. The
winner pays the runner-up's price, so bidding the true value is the dominant strategy.

First price (``at=1``): the winner pays its own bid, so bidding the value earns
nothing. Bid the ``b`` that maximizes the expected surplus ``(value - b) x P(win | b)``
with the win-rate curve ``P(win | b) = sigmoid(alpha + beta ln b)`` for this floor
(``models.win_rate``). With ``s = sigmoid(alpha + beta u)``, ``b = e^u``, the surplus'
derivative has the sign of

    h(u) = beta (value - b)(1 - s) - b,

which falls strictly in ``u`` (for beta > 0): the optimum is its one root, found by
Newton steps kept inside a shrinking bracket, then clamped to [floor, ceiling].
"""

from __future__ import annotations

import math

from models.win_rate import WinRateModel

FIRST_PRICE = 1
_MICROS = 1_000_000
_TOLERANCE = 1e-9
_MAX_STEPS = 40


def impression_value(click_value_micros: int, p_click: float) -> int:
    """An impression's worth as a CPM in micros; raises ValueError for a bad probability."""
    if not 0.0 <= p_click <= 1.0:  # also catches NaN
        raise ValueError(f"P(click) must be in [0, 1], got {p_click}")
    return int(click_value_micros * 1000 * p_click)


def bid_price(
    value_micros: int,
    floor_micros: int,
    max_bid_micros: int,
    at: int,
    win_rate: WinRateModel | None,
) -> int | None:
    """The bid in CPM micros, or None when no bid at or above the floor is worth making.

    ``win_rate`` None means no shading (first price bids the ceiling too).
    """
    ceiling = unshaded_price(value_micros, max_bid_micros)
    lowest = max(floor_micros, 1)
    if ceiling < lowest:
        return None
    if at != FIRST_PRICE or win_rate is None:
        return ceiling
    alpha, beta = win_rate.curve(floor_micros)
    return shade(value_micros, lowest, ceiling, alpha, beta)


def unshaded_price(value_micros: int, max_bid_micros: int) -> int:
    """The ceiling: what a second-price auction is bid, and first price before shading."""
    return min(value_micros, max_bid_micros)


def shade(value_micros: int, lowest: int, ceiling: int, alpha: float, beta: float) -> int:
    """argmax of (value - b) sigmoid(alpha + beta ln b) over b in [lowest, ceiling]."""
    if beta <= 0:  # a curve that does not rise with the bid: no basis to shade on
        return ceiling
    value = value_micros / _MICROS
    lo, hi = math.log(lowest / _MICROS), math.log(ceiling / _MICROS)
    if _h(lo, value, alpha, beta) <= 0:
        return lowest
    if _h(hi, value, alpha, beta) >= 0:
        return ceiling
    exp = math.exp
    u = (lo + hi) / 2
    for _ in range(_MAX_STEPS):
        # h(u) as in _h, and its slope dh/du; written out here because this loop runs
        # for every first-price bid and the calls cost more than the arithmetic.
        b = exp(u)
        z = alpha + beta * u
        if z >= 0:
            s = 1.0 / (1.0 + exp(-z))
        else:
            e = exp(z)
            s = e / (1.0 + e)
        gap, rest = value - b, 1 - s
        h = beta * gap * rest - b
        if abs(h) < _TOLERANCE:
            break
        slope = -beta * b * rest - beta * beta * gap * s * rest - b
        if h > 0:
            lo = u
        else:
            hi = u
        step = u - h / slope
        u = step if lo < step < hi else (lo + hi) / 2  # Newton, or bisect when it leaves
        if hi - lo < _TOLERANCE:
            break
    return min(max(int(exp(u) * _MICROS), lowest), ceiling)


def _h(u: float, value: float, alpha: float, beta: float) -> float:
    """h(u) (see the module doc)."""
    b = math.exp(u)
    return beta * (value - b) * (1 - _sigmoid(alpha + beta * u)) - b


def expected_surplus(value_micros: int, bid_micros: int, alpha: float, beta: float) -> float:
    """(value - bid) x P(win | bid), in CPM micros; for tests and reports."""
    p = _sigmoid(alpha + beta * math.log(bid_micros / _MICROS))
    return (value_micros - bid_micros) * p


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)
