"""The stream format's recorded fields: the market price and the click of imported logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bidder.bidstream.stream import StreamFormatError, encode_record, read_stream, write_stream

REQUEST = {"id": "r", "imp": [{"id": "1"}]}


def test_recorded_price_and_click_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.gz"
    write_stream(
        path,
        [
            encode_record(0, 5, "adx-1", request=REQUEST, market_price=0.080645, click=True),
            encode_record(1, 6, "adx-1", request=REQUEST),
        ],
    )
    first, second = read_stream(path)
    assert (first.market_price, first.click) == (0.080645, True)
    assert (second.market_price, second.click) == (None, None)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ('"market_price": -1', "market_price"),
        ('"market_price": "0.5"', "market_price"),
        ('"market_price": true', "market_price"),
        ('"click": 1', "click"),
    ],
)
def test_a_bad_recorded_field_names_the_line_and_field(
    tmp_path: Path, extra: str, named: str
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(f'{{"t_ms": 0, "ssp": "a", "request": {{}}, {extra}}}\n')
    with pytest.raises(StreamFormatError, match=rf"s\.jsonl:1: field '{named}'"):
        list(read_stream(path))
