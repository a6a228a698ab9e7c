"""The short form of ``bidder/chaos/scenarios/steady.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(20)]


def test_steady_replay_answers_in_time_and_the_ledger_matches_the_totals(tmp_path: Path) -> None:
    passes("steady", tmp_path)
