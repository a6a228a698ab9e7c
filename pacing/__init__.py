"""Budget pacing: curves, the PID controller, leases, the reconciler, the simulator.

The bidder uses ``NodePacer`` (stage 6 and the win hook) with a ``LeaseReader``
refreshed by ``run_refresher``; the reconciler process runs ``build_reconciler`` +
``run_reconciler``; the offline tools live in ``pacing.simulate``, ``pacing.tune`` and
``pacing.cli`` (``add_commands``). See docs/pacing.md.
"""

from __future__ import annotations

from pacing.curves import STANDARD, Curve, CurveError, load_curve_dir, resolve_curve
from pacing.lease import Lease, chunk_micros
from pacing.lease_store import LeaseReader, LeaseWriter
from pacing.node import NodePacer, refresh_once, return_leases, run_refresher
from pacing.pid import Pid, PidGains
from pacing.reconcile import Budget, PacingConfig, Reconcile
from pacing.reconciler import (
    DEFAULT_STREAM,
    Reconciler,
    build_reconciler,
    campaigns_from_store,
    run_reconciler,
)

__all__ = [
    "DEFAULT_STREAM",
    "STANDARD",
    "Budget",
    "Curve",
    "CurveError",
    "Lease",
    "LeaseReader",
    "LeaseWriter",
    "NodePacer",
    "PacingConfig",
    "Pid",
    "PidGains",
    "Reconcile",
    "Reconciler",
    "build_reconciler",
    "campaigns_from_store",
    "chunk_micros",
    "load_curve_dir",
    "refresh_once",
    "resolve_curve",
    "return_leases",
    "run_reconciler",
    "run_refresher",
]
