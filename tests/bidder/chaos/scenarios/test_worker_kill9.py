"""The short form of ``bidder/chaos/scenarios/worker_kill9.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(22)]


def test_a_worker_killed_with_sigkill_loses_no_acknowledged_bill(tmp_path: Path) -> None:
    passes("worker_kill9", tmp_path)
