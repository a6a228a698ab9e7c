"""Serving: identical scores to training, artifact checks, reload, typed failures."""

from __future__ import annotations

import dataclasses
import gc
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest

from bidder.core.clock import ManualClock
from bidder.decide.eligibility import Candidate
from bidder.decide.pricing import base_price
from models import features
from models.price import bid_price, impression_value
from models.scorer import META_FILE, MODEL_FILE, ArtifactError, ModelHandle, Scorer, ScoringError
from models.serving import Pricer
from models.train import TrainConfig, fit, write_artifact
from tests.models.conftest import World


def _serving_rows(world: World, n: int) -> list[bytes]:
    """Each impression's row as the pricer packs it."""
    return [
        features.pack_rows(i.request, i.ssp, i.profile, [i.candidate], i.ts)
        for i in world.impressions[:n]
    ]


def test_serving_scores_equal_training_time_predict(world: World, scorer: Scorer) -> None:
    at_training = world.booster.predict(world.data.x[:500])
    served = [scorer.predict(row)[0] for row in _serving_rows(world, 500)]
    assert served == at_training.tolist()


def test_one_batch_scores_equal_single_row_scores(world: World, scorer: Scorer) -> None:
    rows = _serving_rows(world, 10)
    batch = scorer.predict(b"".join(rows))
    assert batch == [scorer.predict(row)[0] for row in rows]


def test_a_batch_larger_than_the_buffer_is_scored(world: World, scorer: Scorer) -> None:
    rows = _serving_rows(world, 1) * 300
    assert len(set(scorer.predict(b"".join(rows)))) == 1


def test_no_rows_get_no_scores(scorer: Scorer) -> None:
    assert scorer.predict(b"") == []


def test_scorers_dropped_after_reloads_free_their_model_cleanly(world: World) -> None:
    [row] = _serving_rows(world, 1)
    expected = Scorer.load(world.artifact).predict(row)
    for _ in range(20):  # what a reloading worker does: a new Scorer, the old one dropped
        assert Scorer.load(world.artifact).predict(row) == expected
    gc.collect()
    survivor = Scorer.load(world.artifact)
    assert survivor.predict(row) == expected


def test_bytes_that_are_not_whole_rows_are_a_scoring_error(scorer: Scorer) -> None:
    with pytest.raises(ScoringError):
        scorer.predict(bytes(2 * features.ROW_BYTES + 8))


def test_rows_that_are_not_packed_are_a_scoring_error(scorer: Scorer) -> None:
    with pytest.raises(ScoringError):
        scorer.predict(np.zeros((1, features.WIDTH)))  # type: ignore[arg-type]


def _copy(world: World, tmp_path: Path) -> Path:
    return Path(shutil.copytree(world.artifact, tmp_path / "artifact"))


def _edit_meta(directory: Path, **changes: object) -> None:
    meta = orjson.loads((directory / META_FILE).read_bytes())
    (directory / META_FILE).write_bytes(orjson.dumps({**meta, **changes}))


def test_refuses_an_artifact_of_another_feature_version(world: World, tmp_path: Path) -> None:
    directory = _copy(world, tmp_path)
    _edit_meta(directory, feature_version=features.FEATURE_VERSION + 1)
    with pytest.raises(ArtifactError, match="feature version"):
        Scorer.load(directory)


def test_refuses_an_artifact_of_another_feature_definition(world: World, tmp_path: Path) -> None:
    directory = _copy(world, tmp_path)
    _edit_meta(directory, fingerprint="0123456789abcdef")
    with pytest.raises(ArtifactError, match="feature definition changed"):
        Scorer.load(directory)


def test_refuses_a_model_file_the_metadata_does_not_describe(world: World, tmp_path: Path) -> None:
    directory = _copy(world, tmp_path)
    with (directory / MODEL_FILE).open("a") as f:
        f.write("\n")
    with pytest.raises(ArtifactError, match="SHA-256"):
        Scorer.load(directory)


def test_a_missing_artifact_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="bidsim train"):
        Scorer.load(tmp_path)


def test_reload_swaps_in_a_retrained_model(world: World, tmp_path: Path) -> None:
    directory = _copy(world, tmp_path)
    handle = ModelHandle.load(directory)
    before = handle.current
    booster, report = fit(world.data, TrainConfig(trees=5, seed=3))
    write_artifact(directory, booster, report, world.win_rate)
    assert handle.reload_if_changed()
    assert handle.current is not before and handle.current.booster.num_trees() == 5


def test_unchanged_artifact_is_not_reloaded(world: World, tmp_path: Path) -> None:
    handle = ModelHandle.load(_copy(world, tmp_path))
    assert not handle.reload_if_changed()


def test_a_failed_reload_keeps_the_old_model(world: World, tmp_path: Path) -> None:
    directory = _copy(world, tmp_path)
    handle = ModelHandle.load(directory)
    before = handle.current
    _edit_meta(directory, fingerprint="0123456789abcdef")
    with pytest.raises(ArtifactError):
        handle.reload()
    assert handle.current is before


# ----------------------------------------------------------------------------- the pricer


def _with(c: Candidate, **changes: object) -> Candidate:
    return Candidate(c.imp, dataclasses.replace(c.campaign, **changes), c.creative)  # type: ignore[arg-type]


def _pricer(world: World, ts: int) -> Pricer:
    return Pricer(ModelHandle.load(world.artifact), ManualClock(start_wall_ms=ts))


def test_pricer_prices_each_scored_candidate_from_its_score(world: World) -> None:
    imp = next(i for i in world.impressions if i.request.at == 1)
    c = imp.candidate
    p = float(
        world.booster.predict(features.build_rows(imp.request, imp.ssp, imp.profile, [c], imp.ts))[
            0
        ]
    )
    value = impression_value(c.campaign.click_value_micros or 0, p)
    expected = bid_price(
        value, c.imp.bidfloor_micros, c.campaign.max_bid_cpm_micros, 1, world.win_rate
    )
    priced = _pricer(world, imp.ts).price(imp.request, imp.ssp, imp.profile, [c])
    assert priced == ([(c, expected)] if expected is not None else [])


def test_pricer_prices_the_same_with_the_load_time_table(world: World) -> None:
    table = features.creative_table(world.campaigns)
    pricer = _pricer(world, world.impressions[0].ts)
    for imp in world.impressions[:200]:
        args = (imp.request, imp.ssp, imp.profile, [imp.candidate])
        assert pricer.price(*args, table) == pricer.price(*args)


def test_campaigns_without_a_click_value_keep_the_base_bid(world: World) -> None:
    imp = world.impressions[0]
    c = imp.candidate
    unscored = Candidate(
        c.imp, dataclasses.replace(c.campaign, click_value_micros=None), c.creative
    )
    priced = _pricer(world, imp.ts).price(imp.request, imp.ssp, imp.profile, [unscored])
    assert priced == [(unscored, base_price(unscored))]


def test_pricer_keeps_the_candidates_order(world: World) -> None:
    imp = world.impressions[0]
    c = imp.candidate
    unscored = Candidate(
        c.imp, dataclasses.replace(c.campaign, click_value_micros=None), c.creative
    )
    rich = Candidate(
        c.imp,
        dataclasses.replace(c.campaign, max_bid_cpm_micros=10**9, click_value_micros=10**9),
        c.creative,
    )
    priced = _pricer(world, imp.ts).price(imp.request, imp.ssp, None, [rich, unscored, rich])
    assert [p[0] for p in priced] == [rich, unscored, rich]


class _BrokenScorer(Scorer):
    def predict(self, packed: bytes) -> list[float]:
        raise ScoringError("model exploded")


def test_a_scoring_failure_is_a_typed_error(world: World) -> None:
    imp = world.impressions[0]
    scorer = Scorer.load(world.artifact)
    handle = ModelHandle(
        world.artifact, _BrokenScorer(scorer.booster, scorer.meta, scorer.win_rate)
    )
    pricer = Pricer(handle, ManualClock())
    with pytest.raises(ScoringError):
        pricer.price(imp.request, imp.ssp, imp.profile, [imp.candidate])


def test_a_fault_in_feature_building_is_a_typed_error(world: World) -> None:
    imp = world.impressions[0]
    broken_profile = object()  # not a Profile: building its columns fails
    with pytest.raises(ScoringError):
        _pricer(world, imp.ts).price(imp.request, imp.ssp, broken_profile, [imp.candidate])  # type: ignore[arg-type]
