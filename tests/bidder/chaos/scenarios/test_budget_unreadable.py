"""The short form of ``bidder/chaos/scenarios/budget_unreadable.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(21)]


def test_unreadable_budget_state_fails_closed_beyond_the_held_leases(tmp_path: Path) -> None:
    passes("budget_unreadable", tmp_path)
