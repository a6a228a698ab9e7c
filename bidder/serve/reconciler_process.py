"""The reconciler as a supervised child process of ``bidsim serve`` and the tests.

The reconciler ticks on its own (``pacing.reconciler``): it must not share a
process with a bid worker (its boto3 calls would take the GIL from the hot path),
and running it as a separate process is also what lets a test stall or kill it the
way the design's failure modes say. It is forked from the workers' fork server
(``bidder.serve.forked_child``), so its start does not import boto3, redis and NumPy
again. It dies with the process that started it and stops on SIGTERM; its output goes
to a log file that lives as long as it does (``log_tail`` shows the end of it).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bidder.serve.forked_child import ForkedChild
from bidder.serve.settings import Settings
from bidder.stack.child import Supervised
from pacing.cli import reconciler_main


def reconciler_argv(settings: Settings) -> list[str]:
    """The ``bidsim reconciler`` options that run the reconciler of ``settings``."""
    if settings.valkey_url is None or settings.aws_endpoint is None:
        raise ValueError("the reconciler needs --valkey and --aws-endpoint")
    argv = [
        "--valkey", settings.valkey_url,
        "--aws-endpoint", settings.aws_endpoint,
        "--region", settings.aws_region,
        "--tick-s", str(settings.pacing_tick_s),
        "--breaker-window-s", str(settings.breaker_window_s),
        "--lag-threshold-s", str(settings.spend_lag_threshold_s),
        "--stream", settings.spend_stream,
        "--spend-table", settings.spend_table,
        "--campaign-table", settings.campaigns_table,
    ]  # fmt: skip
    if settings.valkey_cluster:
        argv.append("--valkey-cluster")
    if settings.sim_clock is not None:
        argv += ["--sim-clock", settings.sim_clock.text]
    if settings.pacing_curves is not None:
        argv += ["--curves", str(settings.pacing_curves)]
    if settings.pacing_config is not None:
        argv += ["--pacing-config", str(settings.pacing_config)]
    if settings.chunk_periods is not None:
        argv += ["--chunk-periods", str(settings.chunk_periods)]
    return argv


@contextlib.contextmanager
def running_reconciler(settings: Settings) -> Iterator[Supervised]:
    """Start the reconciler; stop it (SIGTERM, then SIGKILL after a grace) on exit."""
    log_dir = Path(tempfile.mkdtemp(prefix="bidsim-reconciler-"))
    child = ForkedChild(
        "reconciler", reconciler_main, reconciler_argv(settings), log_dir / "reconciler.log"
    )
    try:
        yield child
    finally:
        child.stop()
        shutil.rmtree(log_dir, ignore_errors=True)
