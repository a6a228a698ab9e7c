"""Budget pacing: curves, the PID controller, leases, the node's pacer, the reconcile.

The package's face is what a bid worker's hot path needs and loads neither redis-py nor
boto3: ``NodePacer`` (stage 6 and the win hook) and the pure pacing logic. The I/O
parts are imported from their modules: the leases in Valkey from ``pacing.lease_store``
(``LeaseReader``, ``LeaseWriter``), the worker's lease refresher from
``pacing.refresher`` (``run_refresher``, ``return_leases``), the reconciler process
from ``pacing.reconciler`` (``build_reconciler``, ``run_reconciler``), the offline
tools from ``pacing.simulate``, ``pacing.tune`` and ``pacing.cli``. See docs/pacing.md.
"""

from __future__ import annotations

from pacing.curves import STANDARD, Curve, CurveError, load_curve_dir, resolve_curve
from pacing.lease import Lease, chunk_micros
from pacing.node import NodePacer
from pacing.pid import Pid, PidGains
from pacing.reconcile import Budget, PacingConfig, Reconcile

__all__ = [
    "STANDARD",
    "Budget",
    "Curve",
    "CurveError",
    "Lease",
    "NodePacer",
    "PacingConfig",
    "Pid",
    "PidGains",
    "Reconcile",
    "chunk_micros",
    "load_curve_dir",
    "resolve_curve",
]
