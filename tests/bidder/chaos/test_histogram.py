"""The workers' latency histogram as scenarios read it (``HistogramSnapshot``): pure."""

from __future__ import annotations

from bidder.chaos.observe import HistogramSnapshot

INF = float("inf")
BEFORE = HistogramSnapshot({0.005: 40, 0.008: 45, 0.01: 45, INF: 45})
AFTER = HistogramSnapshot({0.005: 90, 0.008: 98, 0.01: 100, INF: 100})


def test_counts_are_the_samples_since_the_earlier_snapshot():
    assert AFTER.count() == 100
    assert AFTER.count(since=BEFORE) == 55


def test_over_a_bucket_bound_counts_the_samples_above_it():
    assert AFTER.over(0.008) == 2
    assert AFTER.over(0.005, since=BEFORE) == 5
    assert AFTER.over(0.01, since=BEFORE) == 0


def test_over_a_bound_that_is_no_bucket_bound_is_unknown():
    assert AFTER.over(0.007) is None


def test_quantile_is_the_bound_of_the_bucket_that_holds_it():
    assert AFTER.quantile_ms(0.9, since=BEFORE) == 5.0  # 49.5 of 55: the first bucket
    assert AFTER.quantile_ms(0.95, since=BEFORE) == 8.0  # 52.25: 53 by 8 ms
    assert AFTER.quantile_ms(0.99, since=BEFORE) == 10.0


def test_quantile_in_the_open_bucket_or_of_nothing_is_none():
    assert HistogramSnapshot({0.01: 10, INF: 20}).quantile_ms(0.99) is None
    assert AFTER.quantile_ms(0.99, since=AFTER) is None
    assert HistogramSnapshot({}).count() == 0
