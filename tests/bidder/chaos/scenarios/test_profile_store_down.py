"""The short form of ``bidder/chaos/scenarios/profile_store_down.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(28)]


def test_a_stalled_then_dead_profile_store_fails_soft(tmp_path: Path) -> None:
    passes("profile_store_down", tmp_path)
