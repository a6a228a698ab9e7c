"""Record times: epoch ms, RFC 3339 and the dataset's clock; send offsets from them."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bidder.bidstream.importers.errors import RowError
from bidder.bidstream.importers.timing import Timeline, epoch_ms, ipinyou_ms

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
moments = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1), timezones=offsets
)


def millis(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(milliseconds=1)


@given(moments)
def test_rfc3339_with_any_offset_is_the_same_instant(moment: datetime) -> None:
    assert epoch_ms(moment.isoformat(timespec="milliseconds")) == millis(moment)


@given(moments)
def test_a_z_suffix_is_utc(moment: datetime) -> None:
    utc = moment.astimezone(UTC)
    text = utc.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
    assert epoch_ms(text) == millis(utc)


@given(st.integers(0, 2**53))
def test_epoch_ms_as_a_number_or_digits_is_itself(value: int) -> None:
    assert epoch_ms(value) == epoch_ms(str(value)) == value


@pytest.mark.parametrize(
    "value", ["2026-01-05T00:00:00", "yesterday", "", None, True, -1, math.nan, [1], "١٢"]
)
def test_anything_else_is_a_time_row_error(value: object) -> None:
    with pytest.raises(RowError) as caught:
        epoch_ms(value)
    assert caught.value.reason == "time"


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 1, 1)))
def test_the_dataset_clock_is_read_as_utc(moment: datetime) -> None:
    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    text = moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"
    assert ipinyou_ms(text.zfill(17)) == millis(moment.replace(tzinfo=UTC))


@pytest.mark.parametrize(
    "text", ["2013060612000000", "201306061200000000", "20131306120000000", "2013060612000000x"]
)
def test_a_bad_dataset_timestamp_is_a_row_error(text: str) -> None:
    with pytest.raises(RowError) as caught:
        ipinyou_ms(text)
    assert caught.value.reason == "timestamp"


@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=50))
def test_offsets_never_decrease_and_follow_the_recorded_time(times: list[int]) -> None:
    timeline = Timeline()
    placed = [timeline.place(ts) for ts in times]
    offsets_ms = [t for t, _, _ in placed]
    assert offsets_ms[0] == 0
    assert offsets_ms == sorted(offsets_ms)
    for i, (t_ms, ts, late) in enumerate(placed):
        assert ts == times[i]  # the recorded time is kept
        assert t_ms == max(0, *(x - times[0] for x in times[: i + 1]))
        assert late == (i > 0 and times[i] - times[0] < offsets_ms[i - 1])


@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=50))
def test_sorted_times_are_sent_at_their_recorded_distances(times: list[int]) -> None:
    times.sort()
    timeline = Timeline()
    assert [timeline.place(ts)[0] for ts in times] == [ts - times[0] for ts in times]


@given(st.floats(0.01, 10_000), st.integers(0, 10**13), st.integers(1, 200))
def test_a_rate_spreads_lines_evenly_from_the_start(rate: float, start: int, n: int) -> None:
    timeline = Timeline(rate, start)
    for i in range(n):
        t_ms, ts, late = timeline.place(None)
        assert t_ms == math.floor(i * 1000 / rate) and ts == start + t_ms and not late


@pytest.mark.parametrize("rate", [0, -1, math.inf, math.nan])
def test_a_bad_rate_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="--rate"):
        Timeline(rate)
