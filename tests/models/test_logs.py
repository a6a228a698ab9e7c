"""Labelled impression logs: deterministic, learnable, and a faithful file format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bidder.core.campaigns import Campaign
from models.logs import LogError, encode, impressions, read_log, write_log
from tests.models.conftest import World


def test_same_seed_gives_the_same_impressions(campaigns: list[Campaign]) -> None:
    first = [encode(i) for i in impressions(50, 11, campaigns)]
    assert first == [encode(i) for i in impressions(50, 11, campaigns)]


def test_clicks_follow_the_true_probability(world: World) -> None:
    p, y = world.data.p_true, world.data.y
    high, low = p >= np.median(p), p < np.median(p)
    assert y[high].mean() > 1.5 * y[low].mean()
    assert abs(y.mean() - p.mean()) < 0.01


def test_every_impression_is_an_eligible_candidate_of_its_request(world: World) -> None:
    for imp in world.impressions[:200]:
        assert imp.candidate.imp in imp.request.imps
        assert imp.candidate.creative in imp.candidate.campaign.creatives


def test_log_file_round_trips(world: World, tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl.gz"
    write_log(path, world.impressions[:100])
    again = list(read_log(path, world.campaigns))
    assert [encode(i) for i in again] == [encode(i) for i in world.impressions[:100]]


def test_a_log_naming_an_unknown_campaign_is_refused_with_its_line(
    world: World, tmp_path: Path
) -> None:
    path = tmp_path / "log.jsonl"
    first = world.impressions[0]
    second = next(
        i for i in world.impressions if i.candidate.campaign.id != first.candidate.campaign.id
    )
    write_log(path, [first, second])
    others = [c for c in world.campaigns if c.id != second.candidate.campaign.id]
    with pytest.raises(LogError, match=":2: unknown or missing"):
        list(read_log(path, others))


def test_a_malformed_line_is_refused_with_its_line(
    tmp_path: Path, campaigns: list[Campaign]
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"ts": 1}\n')
    with pytest.raises(LogError, match=":1:"):
        list(read_log(path, campaigns))
