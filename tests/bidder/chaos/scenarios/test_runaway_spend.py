"""The short form of ``bidder/chaos/scenarios/runaway_spend.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(25)]


def test_runaway_spend_trips_the_breaker_and_the_bidder_stops_bidding(tmp_path: Path) -> None:
    passes("runaway_spend", tmp_path)
