"""The short form of ``bidder/chaos/scenarios/spend_stream_down.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(17)]


def test_bills_acknowledged_while_the_spend_stream_is_down_are_not_lost(tmp_path: Path) -> None:
    passes("spend_stream_down", tmp_path)
