"""Training: beats the baseline on generated logs, reproducibly; the metrics are right."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from models.train import TrainConfig, auc, fit, logloss
from tests.models.conftest import CONFIG, World


def test_holdout_auc_is_clearly_above_the_baseline(world: World) -> None:
    assert world.report.baseline_auc == 0.5
    assert world.report.auc > 0.6


def test_holdout_logloss_beats_the_base_rate(world: World) -> None:
    assert world.report.logloss < world.report.baseline_logloss


def test_the_oracle_bounds_the_model(world: World) -> None:
    assert world.report.oracle_auc > world.report.auc - 0.03


def test_same_data_and_seed_give_the_same_model(world: World) -> None:
    again, _ = fit(world.data, CONFIG)
    assert again.model_to_string() == world.booster.model_to_string()


def test_bad_config_is_refused_by_name(world: World) -> None:
    with pytest.raises(ValueError, match="--trees"):
        fit(world.data, TrainConfig(trees=0))


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=2, max_size=30))
def test_auc_equals_the_pairwise_definition(pairs: list[tuple[bool, int]]) -> None:
    y = np.array([float(label) for label, _ in pairs])
    s = np.array([float(score) for _, score in pairs])
    assume(0 < y.sum() < len(y))
    pos, neg = s[y == 1], s[y == 0]
    brute = np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg])
    assert auc(y, s) == pytest.approx(brute)


def test_logloss_of_a_constant_is_the_entropy() -> None:
    y = np.array([1.0, 0.0, 0.0, 0.0])
    assert logloss(y, np.full(4, 0.25)) == pytest.approx(-(np.log(0.25) + 3 * np.log(0.75)) / 4)
