"""The short form of ``bidder/chaos/scenarios/region_partition.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bidder.chaos.scenarios.short_form import passes

pytestmark = [pytest.mark.chaos, pytest.mark.long(18)]


def test_a_region_partition_heals_into_the_billed_counts_everywhere(tmp_path: Path) -> None:
    passes("region_partition", tmp_path)
