"""Metrics counted in plain per-process numbers and published to Prometheus in batches.

Why: in a worker, prometheus_client's multi-process mode makes every increment a
check of the process id under a lock and a write to a memory-mapped file, which
sampling profiles put at about a sixth of a bid worker's CPU. Here recording is an
addition to a Python number (a counter, a gauge's value, a histogram's bucket slot);
``flush`` hands what was recorded since the last flush to the Prometheus metric of the
same name, labels and kind, so the admin port's ``/metrics`` (which aggregates the
workers' multi-process files, ``bidder.serve.admin``) keeps its names and exact values, at
most one flush interval behind. ``run_flusher`` flushes every ``FLUSH_S`` in each
worker; a worker flushes once more as it stops.

Each flush ends by publishing the wall time at which it began (``PUBLISHED_NAME``, the
least recent of the live workers'): a reader that wants every count made before some
instant waits until that stamp has passed it (``bidder.replay.admin_metrics``), rather
than sleeping and hoping a worker the machine had descheduled has flushed meanwhile.

The Prometheus metrics themselves are made by ``bind`` (or a metric's first flush),
not as the module that declares them is imported: ``prometheus_client`` chooses its
multi-process mode and directory as it loads and as each value is made, so a process
that imports the bid path before it knows its bidder's directory (the workers' fork
server, ``bidder.serve.worker_start``) must not load it. A worker binds as it starts,
so ``/metrics`` shows every metric, at 0, from then on.

Record on the event loop's thread only (every caller does): increments are plain
read-modify-writes with no lock, and the flusher runs on the same thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Literal

log = logging.getLogger(__name__)

FLUSH_S = 1.0
"""How often a worker publishes what it counted; also the most ``/metrics`` lags."""

GaugeMode = Literal["all", "liveall", "min", "livemin", "max", "livemax", "sum", "livesum"]

_REGISTERED: list[Counter | Gauge | Histogram] = []

PUBLISHED_NAME = "bidsim_metrics_published_seconds"
_published_at: Any = None
"""Made by the first flush, so that only processes that publish counts stamp them (a
stamp at 0 from a process that never flushes would hold every reader back)."""


def _prometheus() -> ModuleType:
    """``prometheus_client``, loaded on first use (see the module's docstring)."""
    import prometheus_client

    return prometheus_client


class _Lazy:
    """A Prometheus metric made by ``make`` at its first use."""

    __slots__ = ("_make", "_target")

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._target: Any = None

    def _bind(self) -> Any:
        if self._target is None:
            self._target = self._make()
        return self._target


class _CounterValue(_Lazy):
    __slots__ = ("_published", "value")

    def __init__(self, make: Callable[[], Any]) -> None:
        super().__init__(make)
        self.value: float = 0
        """Everything counted in this process so far."""
        self._published: float = 0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def _flush(self) -> None:
        target = self._bind()
        delta = self.value - self._published
        if delta:
            target.inc(delta)
            self._published += delta


class Counter(_CounterValue):
    """A counter without labels (``inc``) or a family of them (``labels(...).inc``)."""

    __slots__ = ("_children", "_labelled")

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(lambda: _prometheus().Counter(name, documentation, labelnames))
        self._labelled = bool(labelnames)
        self._children: dict[tuple[str, ...], _CounterValue] = {}
        _REGISTERED.append(self)

    def labels(self, *values: str) -> _CounterValue:
        """The child of these label values; resolve it once where it is used per request."""
        child = self._children.get(values)
        if child is None:
            child = _CounterValue(lambda: self._family().labels(*values))
            self._children[values] = child
        return child

    def _family(self) -> Any:
        return super()._bind()

    def _bind(self) -> Any:
        family = self._family()
        for child in self._children.values():
            child._bind()
        return family

    def _flush(self) -> None:
        if not self._labelled:
            super()._flush()
            return
        if self.value:
            raise ValueError("a labelled counter counts through labels(...)")
        for child in self._children.values():
            child._flush()


class Gauge(_Lazy):
    """A gauge without labels; the last value set is what the next flush publishes."""

    __slots__ = ("_published", "value")

    def __init__(self, name: str, documentation: str, multiprocess_mode: GaugeMode) -> None:
        super().__init__(
            lambda: _prometheus().Gauge(name, documentation, multiprocess_mode=multiprocess_mode)
        )
        self.value = 0.0
        self._published: float | None = None
        _REGISTERED.append(self)

    def set(self, value: float) -> None:
        self.value = value

    def _flush(self) -> None:
        target = self._bind()
        if self.value != self._published:
            target.set(self.value)
            self._published = self.value


class Histogram(_Lazy):
    """A histogram without labels: ``observe`` adds one to its bucket's slot."""

    __slots__ = ("_bounds", "_counts", "_published", "_sum")

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        super().__init__(lambda: _prometheus().Histogram(name, documentation, buckets=buckets))
        self._bounds = (*sorted(buckets), float("inf"))
        self._counts = [0] * len(self._bounds)
        self._published = [0] * len(self._bounds)
        self._sum = 0.0
        _REGISTERED.append(self)

    def observe(self, value: float) -> None:
        # Prometheus buckets are "less than or equal": the first bound >= value.
        self._counts[bisect_left(self._bounds, value)] += 1
        self._sum += value

    def _flush(self) -> None:
        # prometheus_client has no public call that adds n samples to one bucket; its
        # histogram keeps one value per bucket (not cumulative) and one for the sum,
        # which is what ``observe`` increments. tests/bidder/core/test_published_metrics.py
        # checks the published text, so a change of those internals fails loudly.
        target = self._bind()
        for i, count in enumerate(self._counts):
            delta = count - self._published[i]
            if delta:
                target._buckets[i].inc(delta)
                self._published[i] = count
        if self._sum:
            target._sum.inc(self._sum)
            self._sum = 0.0


def bind() -> None:
    """Make the Prometheus metric of everything declared so far (and of each label
    child resolved so far), publishing nothing: each then shows in ``/metrics``."""
    for metric in _REGISTERED:
        metric._bind()


def flush() -> None:
    """Publish everything recorded since the last flush. A metric that cannot be
    published does not hold the others back: the first such error is raised after.
    The stamp goes last, so a reader that sees it sees the counts it stands for."""
    global _published_at
    # The real wall clock, not a bidder's (possibly simulated) one: readers in other
    # processes compare the stamp with their own reading of it.
    began = time.time()
    failure: Exception | None = None
    for metric in _REGISTERED:
        try:
            metric._flush()
        except Exception as exc:
            failure = failure or exc
    if _published_at is None:
        _published_at = _prometheus().Gauge(
            PUBLISHED_NAME,
            "Unix time at which the live worker that published its counts least recently "
            "began doing so: every count made before it is in /metrics",
            multiprocess_mode="livemin",
        )
    _published_at.set(began)
    if failure is not None:
        raise failure


async def run_flusher(every_s: float = FLUSH_S) -> None:
    """Flush every ``every_s`` until cancelled, then once more. A failing flush (a bug)
    is logged and the next one tried: the flusher never stops publishing."""
    try:
        while True:
            await asyncio.sleep(every_s)
            _flush_logged()
    finally:
        _flush_logged()


def _flush_logged() -> None:
    try:
        flush()
    except Exception:
        log.exception("publishing the metrics failed; trying again at the next flush")
