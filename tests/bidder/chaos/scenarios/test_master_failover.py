"""The short form of ``bidder/chaos/scenarios/master_failover.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(30)]


def test_a_killed_cluster_master_fails_over_without_a_bidder_restart(tmp_path: Path) -> None:
    passes("master_failover", tmp_path)
