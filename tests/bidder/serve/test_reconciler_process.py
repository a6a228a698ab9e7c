"""The reconciler as the bidder's supervised child: it stops when told, however the
stop signals come (the stack's SIGTERM and the one it sends itself when it sees the
process that started it die, ``die_with``, arrive together when a replay is killed)."""

from __future__ import annotations

import os
import signal

from bidder.serve.reconciler_process import running_reconciler
from bidder.serve.server import prepare_resources
from bidder.serve.settings import Settings

WAIT_S = 30.0
"""Bound on the reconciler starting or stopping; never reached when things work."""


def test_the_reconciler_stops_on_a_burst_of_stop_signals(bidder_settings: Settings) -> None:
    prepare_resources(bidder_settings)
    with running_reconciler(bidder_settings) as child:
        child.wait_ready(lambda: "reconciler ticking" in child.log_tail(), WAIT_S)
        for _ in range(50):
            try:
                os.kill(child.pid, signal.SIGTERM)
                os.kill(child.pid, signal.SIGINT)
            except ProcessLookupError:  # it stopped within the burst and was reaped
                break
        assert child.wait(WAIT_S) == 0, child.log_tail()
