"""Reading a metric as the admin port would show it once the worker has flushed."""

from __future__ import annotations

from prometheus_client import REGISTRY

from bidder.core.published_metrics import flush


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    """The sample's value in this process after a flush (0 when never recorded)."""
    flush()
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0
