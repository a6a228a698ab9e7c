"""Target curves: shares, files, bidstreams, names."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacing.curves import (
    DAY_S,
    HOUR_S,
    STANDARD,
    Curve,
    CurveError,
    curve_from_stream,
    load_curve_file,
    resolve_curve,
    second_of_day,
)

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[2]
SAMPLE_STREAM = REPO / "fixtures" / "openrtb" / "sample-stream.jsonl.gz"
weights = st.lists(st.floats(0, 1e6, allow_nan=False), min_size=24, max_size=24).filter(
    lambda ws: sum(ws) > 0
)


@given(weights, st.floats(0, DAY_S), st.floats(0, DAY_S))
def test_share_is_monotone_from_zero_to_one(ws: list[float], a: float, b: float) -> None:
    curve = Curve.from_weights(ws)
    lo, hi = sorted((a, b))
    assert 0.0 <= curve.share_at(lo) <= curve.share_at(hi) <= 1.0
    assert curve.share_at(0) == 0.0 and curve.share_at(DAY_S) == 1.0


@given(weights, st.integers(0, 23))
def test_each_hour_gets_its_weight_share(ws: list[float], hour: int) -> None:
    curve = Curve.from_weights(ws)
    assert curve.hour_share(hour) == pytest.approx(ws[hour] / sum(ws), abs=1e-9)


@given(st.integers(1, 10**13), st.floats(0, DAY_S))
def test_target_is_integer_micros_within_budget(budget: int, second: float) -> None:
    target = STANDARD.target_micros(budget, second)
    assert isinstance(target, int) and 0 <= target <= budget


def test_standard_curve_day_supply_is_3_to_5x_night() -> None:
    peak, trough = max(STANDARD.weights), min(STANDARD.weights)
    assert 3.0 <= peak / trough <= 5.0


def test_second_of_day_is_utc() -> None:
    assert second_of_day(1_767_225_600_000 + 3_600_500) == pytest.approx(3600.5)


@pytest.mark.parametrize(
    "bad", [[1.0] * 23, [0.0] * 24, [*[1.0] * 23, -1.0], [*[1.0] * 23, float("nan")]]
)
def test_invalid_weights_are_refused(bad: list[float]) -> None:
    with pytest.raises(CurveError):
        Curve.from_weights(bad)


def test_curve_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(orjson.dumps(STANDARD.to_doc("standard")))
    assert load_curve_file(path).weights == STANDARD.weights


def test_curve_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"weights": "no"}')
    with pytest.raises(CurveError, match=r"bad\.json"):
        load_curve_file(path)
    with pytest.raises(CurveError, match="not found"):
        load_curve_file(tmp_path / "missing.json")


def test_curve_from_the_sample_stream_follows_its_diurnal_supply() -> None:
    curve, counts = curve_from_stream(SAMPLE_STREAM)
    assert sum(counts) > 0
    # The generator's supply peaks in the evening and bottoms out before dawn (UTC).
    assert curve.hour_share(20) > 2 * curve.hour_share(4)


def test_a_stream_missing_hours_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "short.jsonl.gz"
    line = {"t_ms": 0, "ts": 1_767_225_600_000 + 5 * HOUR_S * 1000, "ssp": "x", "request": {}}
    path.write_bytes(gzip.compress(orjson.dumps(line) + b"\n"))
    with pytest.raises(CurveError, match="UTC hour"):
        curve_from_stream(path)


def test_resolve_names_and_weights() -> None:
    assert resolve_curve("default") is STANDARD
    assert resolve_curve(tuple([1.0] * 24)).hour_share(0) == pytest.approx(1 / 24)
    with pytest.raises(CurveError, match="unknown pacing curve"):
        resolve_curve("nope")
