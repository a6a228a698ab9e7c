"""Arrival times: one simulated day of supply compressed into the stream's send time.

The intensity is piecewise constant per simulated hour (``HOURLY_WEIGHTS``, in the
stream's clock, i.e. hours after ``day_start``): trough at 04:00, peak at 20:00,
peak/trough 4.0, and the busiest three hours (19-21) carry 3.7x the quietest three
(03-05). Given the number of arrivals, an inhomogeneous Poisson process is sampled by
time rescaling: n sorted uniforms on the cumulative-intensity scale (normalized
exponential gaps), mapped back through the inverse of the piecewise-linear cumulative
intensity. The result is sorted by construction, so ``t_ms`` never goes backwards.
"""

from __future__ import annotations

import numpy as np

HOURLY_WEIGHTS: tuple[float, ...] = (
    2.6, 1.9, 1.45, 1.2, 1.1, 1.2, 1.6, 2.3, 2.9, 3.2, 3.4, 3.5,
    3.6, 3.5, 3.4, 3.4, 3.5, 3.8, 4.1, 4.3, 4.4, 4.2, 3.7, 3.1,
)  # fmt: skip
"""Relative supply per hour 00..23 (documented in docs/bidstream.md)."""


def day_fractions(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` sorted arrival instants as fractions of the day in [0, 1)."""
    gaps = rng.exponential(size=n + 1)
    # Order statistics of n uniforms: cumulative exponential gaps over their total.
    scaled = np.cumsum(gaps)[:-1] / gaps.sum()
    weights = np.asarray(HOURLY_WEIGHTS)
    edges = np.concatenate(([0.0], np.cumsum(weights) / weights.sum()))
    hours = np.arange(len(weights) + 1) / len(weights)
    return np.minimum(np.interp(scaled, edges, hours), np.nextafter(1.0, 0.0))
