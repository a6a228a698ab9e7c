"""The short form of ``bidder/chaos/scenarios/reconciler_stall.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(19)]


def test_a_stalled_reconciler_bounds_overspend_to_two_chunks_per_node(tmp_path: Path) -> None:
    passes("reconciler_stall", tmp_path)
