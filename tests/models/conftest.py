"""A small generated world for model tests: impressions, a trained artifact, a scorer.

Built once per session (about 3 s): 4,000 labelled impressions, a 40-tree model and
a win-rate fit on 20,000 exchange outcomes, written to a temporary artifact directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lightgbm
import pytest

from bidder.core.campaign_docs import load_campaign_file
from bidder.core.campaigns import Campaign
from models.logs import Impression, impressions, win_outcomes
from models.scorer import Scorer
from models.train import Dataset, TrainConfig, TrainReport, dataset, fit, write_artifact
from models.win_rate import WinRateModel

REPO = Path(__file__).resolve().parents[2]
CAMPAIGNS = REPO / "fixtures" / "openrtb" / "campaigns.json"
IMPRESSIONS = 4_000
CONFIG = TrainConfig(trees=40, seed=3)


@dataclass(frozen=True)
class World:
    campaigns: list[Campaign]
    impressions: list[Impression]
    data: Dataset
    booster: lightgbm.Booster
    report: TrainReport
    win_rate: WinRateModel
    artifact: Path


@pytest.fixture(scope="session")
def campaigns() -> list[Campaign]:
    return load_campaign_file(CAMPAIGNS)


@pytest.fixture(scope="session")
def world(campaigns: list[Campaign], tmp_path_factory: pytest.TempPathFactory) -> World:
    items = list(impressions(IMPRESSIONS, 7, campaigns))
    data = dataset(items)
    booster, report = fit(data, CONFIG)
    outcomes = win_outcomes(20_000, 7)
    win_rate = WinRateModel.fit(outcomes.bids_micros, outcomes.floors_micros, outcomes.won)
    artifact = tmp_path_factory.mktemp("artifact")
    write_artifact(artifact, booster, report, win_rate)
    return World(campaigns, items, data, booster, report, win_rate, artifact)


@pytest.fixture()
def scorer(world: World) -> Scorer:
    return Scorer.load(world.artifact)
