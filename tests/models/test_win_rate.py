"""The win-rate model learnt from the replay's exchange model."""

from __future__ import annotations

import numpy as np
import pytest

from models.logs import win_outcomes
from models.win_rate import WinRateModel, band
from tests.models.conftest import World

pytestmark = pytest.mark.pure


def test_win_probability_rises_with_the_bid(world: World) -> None:
    p = [world.win_rate.p_win(b, 1_000_000) for b in (1_000_000, 1_500_000, 3_000_000, 6_000_000)]
    assert p == sorted(p) and p[0] < 0.5 < p[-1]


def test_a_bid_below_the_floor_never_wins(world: World) -> None:
    assert world.win_rate.p_win(999_999, 1_000_000) == 0.0


def test_fitted_curve_matches_fresh_exchange_outcomes(world: World) -> None:
    fresh = win_outcomes(20_000, 99)
    predicted = np.array(
        [
            world.win_rate.p_win(int(b), int(f))
            for b, f in zip(fresh.bids_micros, fresh.floors_micros, strict=True)
        ]
    )
    for lo, hi in ((0.0, 0.3), (0.3, 0.6), (0.6, 0.9), (0.9, 1.0)):
        sel = (predicted >= lo) & (predicted < hi)
        assert abs(predicted[sel].mean() - fresh.won[sel].mean()) < 0.04


def test_round_trips_through_its_document(world: World) -> None:
    assert WinRateModel.from_doc(world.win_rate.to_doc()) == world.win_rate


@pytest.mark.parametrize(
    "doc",
    [None, {"band_edges_micros": [1, 2]}, {"band_edges_micros": [0, 500_000, 2_000_000]}],
)
def test_rejects_a_document_of_another_shape(doc: object) -> None:
    with pytest.raises(ValueError):
        WinRateModel.from_doc(doc)


def test_refuses_outcomes_without_losses() -> None:
    n = 1_000
    with pytest.raises(ValueError, match="wins and losses"):
        WinRateModel.fit(np.full(n, 1e6), np.zeros(n), np.ones(n))


@pytest.mark.parametrize(
    ("floor", "expected"), [(0, 0), (1, 1), (500_000, 1), (500_001, 2), (2_000_001, 3)]
)
def test_floor_bands(floor: int, expected: int) -> None:
    assert band(floor) == expected
