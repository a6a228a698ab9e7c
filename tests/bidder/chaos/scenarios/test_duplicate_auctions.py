"""The short form of ``bidder/chaos/scenarios/duplicate_auctions.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(18)]


def test_duplicate_auctions_across_ssps_get_one_bid_each(tmp_path: Path) -> None:
    passes("duplicate_auctions", tmp_path)
