"""Counts kept in plain numbers reach Prometheus exactly, and only when flushed."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client import Histogram as ReferenceHistogram

from bidder.core.published_metrics import (
    PUBLISHED_NAME,
    Counter,
    Gauge,
    Histogram,
    bind,
    flush,
    run_flusher,
)
from tests.processes import REPO

BOUNDS = (0.001, 0.002, 0.005, 0.01)


def _name(kind: str) -> str:
    return f"bidsim_test_{kind}_{uuid.uuid4().hex[:8]}"


def _value(name: str, labels: dict[str, str] | None = None) -> float | None:
    return REGISTRY.get_sample_value(name, labels or {})


def test_a_counter_is_published_at_the_flush_exactly() -> None:
    name = _name("counter")
    counter = Counter(name, "test")
    counter.inc()
    counter.inc(4)
    assert _value(f"{name}_total") is None  # recorded; not even made in Prometheus yet
    flush()
    assert _value(f"{name}_total") == 5.0
    counter.inc()
    flush()
    flush()  # a flush with nothing new adds nothing
    assert _value(f"{name}_total") == 6.0


def test_bind_makes_each_metric_and_label_child_so_far_showing_nothing_counted() -> None:
    names = {kind: _name(kind) for kind in ("counter", "family", "gauge", "histogram")}
    counter = Counter(names["counter"], "test")
    family = Counter(names["family"], "test", ["outcome"])
    Gauge(names["gauge"], "test", multiprocess_mode="max").set(4)
    Histogram(names["histogram"], "test", BOUNDS).observe(0.001)
    counter.inc(2)
    family.labels("won").inc(3)
    bind()
    assert _value(f"{names['counter']}_total") == 0.0
    assert _value(f"{names['family']}_total", {"outcome": "won"}) == 0.0
    assert _value(names["gauge"]) == 0.0
    assert _value(f"{names['histogram']}_count") == 0.0
    flush()
    assert _value(f"{names['counter']}_total") == 2.0
    assert _value(f"{names['family']}_total", {"outcome": "won"}) == 3.0
    assert _value(names["gauge"]) == 4.0
    assert _value(f"{names['histogram']}_count") == 1.0


_IMPORT_THE_BID_PATH = """
import sys
import bidder.serve.worker, fcap.metrics
print("prometheus_client" in sys.modules)
"""


def test_importing_the_bid_path_does_not_load_prometheus() -> None:
    """The workers' fork server imports it before it knows a bidder's metrics directory."""
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_THE_BID_PATH],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (out.returncode, out.stdout, out.stderr) == (0, "False\n", "")


def test_each_label_child_is_published_on_its_own() -> None:
    name = _name("family")
    family = Counter(name, "test", ["outcome"])
    won, lost = family.labels("won"), family.labels("lost")
    won.inc(2)
    lost.inc()
    assert family.labels("won") is won  # resolved once, reused
    flush()
    assert _value(f"{name}_total", {"outcome": "won"}) == 2.0
    assert _value(f"{name}_total", {"outcome": "lost"}) == 1.0


def test_a_labelled_counter_refuses_a_count_without_labels() -> None:
    family = Counter(_name("family"), "test", ["outcome"])
    family.inc()
    with pytest.raises(ValueError, match="labels"):
        flush()
    family.value = 0  # leave the shared registry flushable for the other tests
    flush()


@pytest.mark.asyncio
async def test_a_metric_that_cannot_be_published_holds_no_other_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = Counter(_name("family"), "test", ["outcome"])
    name = _name("counted")
    counter = Counter(name, "test")
    broken.inc()  # a bug: counted without labels
    counter.inc(3)
    flusher = asyncio.get_running_loop().create_task(run_flusher(every_s=0.01))
    for _ in range(200):  # bounded: the flusher's first pass, not a time assert
        await asyncio.sleep(0.01)
        if _value(f"{name}_total") == 3.0:
            break
    broken.value = 0  # leave the shared registry flushable for the other tests
    flusher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flusher
    assert _value(f"{name}_total") == 3.0
    assert "publishing the metrics failed" in caplog.text


def test_a_gauge_publishes_its_last_value() -> None:
    name = _name("gauge")
    gauge = Gauge(name, "test", multiprocess_mode="max")
    gauge.set(3)
    gauge.set(7)
    flush()
    assert _value(name) == 7.0


_HISTOGRAM_NAME = _name("histogram")
_HISTOGRAM = Histogram(_HISTOGRAM_NAME, "test", BOUNDS)
_REFERENCE_REGISTRY = CollectorRegistry()
_REFERENCE = ReferenceHistogram(
    "reference", "the library's own", buckets=BOUNDS, registry=_REFERENCE_REGISTRY
)
# Bucket bounds themselves are drawn often: "less than or equal" is the edge to get right.
_SAMPLES = st.lists(
    st.one_of(st.sampled_from(BOUNDS), st.floats(min_value=0, max_value=0.05)), max_size=50
)


@settings(max_examples=60)
@given(values=_SAMPLES)
def test_a_histogram_publishes_what_the_library_itself_would(values: list[float]) -> None:
    for value in values:
        _HISTOGRAM.observe(value)
        _REFERENCE.observe(value)
    flush()
    name = _HISTOGRAM_NAME
    for bound in (*BOUNDS, math.inf):
        le = {"le": "+Inf" if bound == math.inf else str(bound)}
        ours = _value(f"{name}_bucket", le)
        theirs = _REFERENCE_REGISTRY.get_sample_value("reference_bucket", le)
        assert ours == theirs, bound
    ours_sum = _value(f"{name}_sum")
    theirs_sum = _REFERENCE_REGISTRY.get_sample_value("reference_sum")
    assert ours_sum == pytest.approx(theirs_sum, rel=1e-9, abs=1e-12)


@pytest.mark.asyncio
async def test_the_flusher_publishes_while_it_runs_and_once_more_when_stopped() -> None:
    name = _name("flushed")
    counter = Counter(name, "test")
    flusher = asyncio.get_running_loop().create_task(run_flusher(every_s=0.01))
    counter.inc()
    for _ in range(200):  # bounded: the flusher's first pass, not a time assert
        await asyncio.sleep(0.01)
        if _value(f"{name}_total") == 1.0:
            break
    assert _value(f"{name}_total") == 1.0
    counter.inc()
    flusher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flusher
    assert _value(f"{name}_total") == 2.0


def test_a_flush_stamps_the_time_it_began_after_publishing_the_counts() -> None:
    name = _name("stamped")
    seen: list[float | None] = []

    class Watching(Counter):
        def _flush(self) -> None:
            seen.append(_value(PUBLISHED_NAME))
            super()._flush()

    Watching(name, "test").inc()
    flush()
    first = _value(PUBLISHED_NAME)
    before = time.time()
    flush()
    after = time.time()
    assert first is not None
    assert seen[-1] == first  # while the counts were being published, the old stamp showed
    assert before <= _value(PUBLISHED_NAME) <= after
