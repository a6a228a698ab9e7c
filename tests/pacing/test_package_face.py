"""The package's face is light: a bid worker's hot path imports it without the I/O clients."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("boto3", "botocore", "redis")


def modules_loaded_by(statement: str) -> set[str]:
    """The top-level modules a fresh interpreter has loaded after ``statement``."""
    probe = f"{statement}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return {name.partition(".")[0] for name in done.stdout.split()}


def test_the_node_pacer_loads_neither_boto3_nor_redis() -> None:
    loaded = modules_loaded_by("from pacing import NodePacer")
    assert not loaded & set(HEAVY), f"the pacing face loads {sorted(loaded & set(HEAVY))}"


def test_the_probe_sees_what_the_refresher_loads() -> None:
    assert "redis" in modules_loaded_by("from pacing.refresher import run_refresher")
