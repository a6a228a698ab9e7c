"""Fixtures for bidder tests: the bundled campaigns loaded into the moto server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bidder.replay.admin_metrics import WATCHED_FLUSH_S
from bidder.serve.server import load_campaigns
from bidder.serve.settings import Settings
from bidder.stack.child import held_port
from tests.bidder.live import CAMPAIGNS, REPO, LiveBidder

EXTERNAL = REPO.parent / "shared" / "external" / "openrtb"


@pytest.fixture(scope="session")
def bidder_settings(
    aws_endpoint: str, valkey_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """Settings of a bidder on a free port whose store holds the bundled campaigns.

    The pacing tick is short so a fresh bidder holds leases within a second; the
    ledger spool lives in the test run's temporary directory. The deadline is
    generous, and so is the cap check's timeout: these tests assert decisions, and a
    2-core machine running the suite stalls now and then for longer than 8 ms (the
    deadline and chaos tests set their own).
    """
    settings = Settings(
        port=held_port(),
        admin_port=0,
        campaigns_path=CAMPAIGNS,
        aws_endpoint=aws_endpoint,
        valkey_url=valkey_url,
        deadline_ms=250.0,
        fcap_check_timeout_ms=100.0,
        # The live bidder shares this process (and its GIL and garbage collector) with
        # the test runner, whose pauses show up as event-loop lag: shed on lag only past
        # the whole deadline, so decision tests see decisions, not the runner's pauses.
        shed_lag_ms=250.0,
        shed_stay_lag_ms=250.0,
        pacing_tick_s=1.0,
        lease_refresh_s=0.2,
        spool_dir=tmp_path_factory.mktemp("spool"),
        metrics_flush_s=WATCHED_FLUSH_S,
    ).validate()
    load_campaigns(CAMPAIGNS, settings)
    return settings


@pytest.fixture(scope="module")
def live_bidder(bidder_settings: Settings) -> Iterator[LiveBidder]:
    with LiveBidder(bidder_settings) as bidder:
        yield bidder
