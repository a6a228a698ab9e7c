"""Fixtures for bidder tests: the bundled campaigns loaded into the moto server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bidder.server import load_campaigns
from bidder.settings import Settings
from bidder.stack import free_port
from tests.bidder.live import LiveBidder

REPO = Path(__file__).resolve().parents[2]
CAMPAIGNS = REPO / "fixtures" / "openrtb" / "campaigns.json"
EXTERNAL = REPO.parent / "shared" / "external" / "openrtb"


@pytest.fixture(scope="session")
def bidder_settings(aws_endpoint: str, valkey_url: str) -> Settings:
    """Settings of a bidder on a free port whose store holds the bundled campaigns."""
    settings = Settings(
        port=free_port(),
        admin_port=free_port(),
        campaigns_path=CAMPAIGNS,
        aws_endpoint=aws_endpoint,
        valkey_url=valkey_url,
    ).validate()
    load_campaigns(CAMPAIGNS, settings)
    return settings


@pytest.fixture(scope="module")
def live_bidder(bidder_settings: Settings) -> Iterator[LiveBidder]:
    with LiveBidder(bidder_settings) as bidder:
        yield bidder
