"""The short form of ``bidder/chaos/scenarios/surge.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(14)]


def test_a_10x_surge_is_shed_with_204s_and_memory_stays_bounded(tmp_path: Path) -> None:
    passes("surge", tmp_path)
