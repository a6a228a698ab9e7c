"""The short form of ``bidder/chaos/scenarios/spend_stream_lag.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(20)]


def test_a_lagging_spend_stream_stops_the_grants_and_spend_within_the_bound(tmp_path: Path) -> None:
    passes("spend_stream_lag", tmp_path)
