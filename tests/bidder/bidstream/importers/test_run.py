"""``bidsim import``: files in order, gzip in and out, the summary, and one-line errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from bidder.bidstream.importers import (
    ImportInputError,
    IpinyouFormat,
    OpenRtbFormat,
    import_files,
)
from bidder.bidstream.importers.timing import Timeline
from bidder.bidstream.stream import read_stream
from bidder.cli import main
from tests.bidder.bidstream.importers.ipinyou_rows import (
    DatasetRow,
    processed_text,
    raw_text,
    spaced,
)
from tests.bidder.conftest import EXTERNAL


def request_line(i: int, ts: int) -> bytes:
    return orjson.dumps({"id": f"r{i}", "imp": [{"id": "1"}], "ts": ts}) + b"\n"


def test_files_are_read_in_order_into_one_gzip_stream(tmp_path: Path) -> None:
    first, second, out = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl", tmp_path / "s.jsonl.gz"
    first.write_bytes(gzip.compress(request_line(0, 1000) + request_line(1, 1040)))
    second.write_bytes(request_line(2, 1100) + b"\n" + request_line(3, 1090))
    tally = import_files([first, second], out, OpenRtbFormat("ts", ssp="x"), Timeline())
    records = list(read_stream(out))
    assert [(r.t_ms, r.ts) for r in records] == [(0, 1000), (40, 1040), (100, 1100), (100, 1090)]
    assert [orjson.loads(r.body)["id"] for r in records] == ["r0", "r1", "r2", "r3"]
    assert (tally.files, tally.lines, tally.written, tally.blank, tally.late) == (2, 5, 4, 1, 1)
    assert out.read_bytes()[:2] == b"\x1f\x8b"


def test_skipped_lines_are_counted_and_the_first_five_named(tmp_path: Path) -> None:
    rows = spaced([DatasetRow()] * 3, gap_ms=10)
    path, out = tmp_path / "imp.txt", tmp_path / "s.jsonl"
    path.write_text(raw_text(rows[:1]) + "bad\n" * 6 + "\t".join(["x"] * 24) + "\n")
    tally = import_files([path], out, IpinyouFormat(), Timeline())
    assert tally.written == 1
    assert dict(tally.skipped) == {"columns": 6, "slot_size": 1}
    assert tally.examples == [f"{path}:{n}: 1 columns, expected 24" for n in range(2, 7)]
    text = tally.render(out)
    assert "columns" in text and f"{path}:2: 1 columns, expected 24" in text


def test_recorded_prices_and_clicks_reach_the_stream(tmp_path: Path) -> None:
    rows = spaced([DatasetRow(payprice="50", click="1"), DatasetRow(payprice="null")], 5)
    path, out = tmp_path / "train.log.txt", tmp_path / "s.jsonl"
    path.write_text(processed_text(rows))
    tally = import_files([path], out, IpinyouFormat(), Timeline())
    first, second = read_stream(out)
    assert (first.market_price, first.click) == (0.080645, True)
    assert (second.market_price, second.click) == (None, False)
    assert (tally.headers, tally.with_price) == (1, 1)


def test_a_corrupt_gzip_input_is_an_error_naming_the_file_and_no_output_is_left(
    tmp_path: Path,
) -> None:
    path, out = tmp_path / "bids.jsonl.gz", tmp_path / "s.jsonl.gz"
    body = gzip.compress(b"".join(request_line(i, i) for i in range(2000)))
    path.write_bytes(body[: len(body) // 2])
    with pytest.raises(ImportInputError, match=r"bids\.jsonl\.gz: unreadable after line \d+"):
        import_files([path], out, OpenRtbFormat("ts", ssp="x"), Timeline())
    assert list(tmp_path.iterdir()) == [path]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["import", *argv, "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_command_prints_the_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "imp.txt"
    path.write_text(raw_text(spaced([DatasetRow()] * 4, 10)))
    code, out, _ = cli(capsys, "ipinyou", str(path), "--out", str(tmp_path / "s.jsonl.gz"))
    assert code == 0
    assert "wrote 4 requests" in out and "with a recorded market price  4" in out


@pytest.mark.parametrize(
    ("content", "args", "named"),
    [
        (None, ["ipinyou"], "cannot open"),
        ("not\ta\tlog\n", ["ipinyou"], ":1: not an iPinYou log"),
        ('{"imp": []}\n', ["openrtb", "--time-field", "ts", "--ssp", "x"], ":1: "),
        ("{}\n", ["openrtb", "--rate", "10", "--ssp", "x", "--start", "soon"], "--start"),
    ],
)
def test_an_unreadable_input_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    content: str | None,
    args: list[str],
    named: str,
) -> None:
    path = tmp_path / "input.txt"
    if content is not None:
        path.write_text(content)
    fmt, *options = args
    code, _, err = cli(capsys, fmt, str(path), "--out", str(tmp_path / "s.jsonl"), *options)
    assert code == 2
    assert named in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s.jsonl").exists()


def test_an_output_directory_that_does_not_exist_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "imp.txt"
    path.write_text(raw_text([DatasetRow()]))
    code, _, err = cli(capsys, "ipinyou", str(path), "--out", str(tmp_path / "no" / "s.jsonl"))
    assert code == 2 and "does not exist" in err


def test_public_openrtb_examples_import_unchanged(tmp_path: Path) -> None:
    """The external corpus' BidRequests, logged one per line, come out as they went in."""
    docs = [orjson.loads(p.read_bytes()) for p in sorted((EXTERNAL / "requests").glob("*.json"))]
    requests = [d for d in docs if isinstance(d, dict) and isinstance(d.get("imp"), list)]
    log, out = tmp_path / "bids.jsonl.gz", tmp_path / "s.jsonl"
    log.write_bytes(gzip.compress(b"".join(orjson.dumps(d) + b"\n" for d in requests)))
    tally = import_files([log], out, OpenRtbFormat(ssp="external"), Timeline(100.0))
    records = list(read_stream(out))
    assert tally.written == len(requests) > 50 and not tally.skipped
    assert [orjson.loads(r.body) for r in records] == requests
    assert [r.t_ms for r in records] == [i * 10 for i in range(len(requests))]
