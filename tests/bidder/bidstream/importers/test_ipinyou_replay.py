"""Acceptance: iPinYou rows in both layouts import, and the stream replays through the
full stack (``bidsim replay``, its own embedded Valkey and moto): the bidder bids where
the campaign file's targeting matches, wins and spend follow the recorded prices, and
the recorded clicks of the wins are counted."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from bidder.bidstream.importers.ipinyou import fen_to_cpm
from bidder.bidstream.stream import read_stream
from bidder.cli import main
from tests.bidder.bidstream.importers.ipinyou_rows import (
    START,
    DatasetRow,
    spaced,
    write_processed,
    write_raw,
)

BIDSIM = Path(sys.executable).parent / "bidsim"
CAMPAIGNS = Path(__file__).resolve().parents[4] / "fixtures" / "openrtb" / "campaigns-ipinyou.json"
SIZES = (("300", "250"), ("728", "90"), ("160", "600"))  # the campaign buys the first two
CHEAP, DEAR = "50", "300"  # fen: USD 0.080645 and 0.483871 CPM, around its USD 0.20 bid
ROWS, GAP_MS = 40, 50


def dataset() -> list[DatasetRow]:
    return [
        DatasetRow(
            slotwidth=SIZES[i % 3][0],
            slotheight=SIZES[i % 3][1],
            payprice=CHEAP if i % 2 == 0 else DEAR,
            ipinyouid=f"user-{i}",
            click="1" if i % 5 == 0 else "0",
        )
        for i in range(ROWS)
    ]


@dataclass(frozen=True)
class Replayed:
    rows: list[DatasetRow]
    report: dict[str, Any]
    stdout: str
    html: str


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    """The rows imported (the first half raw, no click column; the rest processed) and
    replayed once through the full stack."""
    tmp_path = tmp_path_factory.mktemp("ipinyou")
    rows = dataset()
    half = ROWS // 2
    raw = write_raw(tmp_path / "imp.20130606.txt", spaced(rows[:half], GAP_MS))
    later = START + timedelta(milliseconds=GAP_MS * half)
    processed = write_processed(tmp_path / "train.log.txt", spaced(rows[half:], GAP_MS, later))
    stream, report = tmp_path / "ipinyou.jsonl.gz", tmp_path / "report.json"
    args = ["import", "ipinyou", str(raw), str(processed), "--out", str(stream), "--no-progress"]
    assert main(args) == 0
    records = list(read_stream(stream))
    assert len(records) == ROWS and all(r.market_price is not None for r in records)
    assert [r.t_ms for r in records] == [GAP_MS * i for i in range(ROWS)]

    replay = [str(BIDSIM), "replay", str(stream), "--campaigns", str(CAMPAIGNS)]
    html = tmp_path / "report.html"
    done = subprocess.run(
        [*replay, "--json", str(report), "--html", str(html), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr
    return Replayed(rows, orjson.loads(report.read_bytes()), done.stdout, html.read_text())


def test_an_imported_ipinyou_stream_bids_wins_and_pays_the_recorded_prices(
    replayed: Replayed,
) -> None:
    rows, result = replayed.rows, replayed.report
    auction, models = result["auction"], result["auction"]["models"]
    bids = result["status"]["200"]
    matching = [i for i in range(ROWS) if i % 3 != 2]
    cheap = [i for i in matching if rows[i].payprice == CHEAP]

    assert result["requests"] == ROWS and result["status"]["5xx"] == 0
    assert 0 < bids <= len(matching)
    assert set(result["nbr_reasons"]) <= {"format", "overloaded", "deadline"}
    assert models["synthetic"]["auctions"] == 0
    assert models["recorded"]["auctions"] == bids == auction["bids"]
    # A win is a cheap row (the bid beats 50 fen, not 300) and pays exactly its price.
    per_win = round(fen_to_cpm(CHEAP, 6.2) * 1000)
    assert 0 < auction["wins"] <= len(cheap)
    assert 0 < bids - auction["wins"] <= len(matching) - len(cheap)
    assert auction["spend_micros"] == auction["wins"] * per_win == 81 * auction["wins"]
    assert "recorded model" in replayed.stdout


def test_the_recorded_clicks_of_its_wins_are_counted_per_campaign(replayed: Replayed) -> None:
    """Only the processed half records clicks (every 5th row); of its rows the campaign
    buys and the recorded price lets win (cheap), row 30 is the one clicked."""
    result, rows = replayed.report, replayed.rows
    wins, recorded = result["auction"]["wins"], result["auction"]["models"]["recorded"]
    half = ROWS // 2
    buyable = [i for i in range(ROWS) if i % 3 != 2 and rows[i].payprice == CHEAP]
    with_record = [i for i in buyable if i >= half]
    assert [i for i in with_record if rows[i].click == "1"] == [30]
    assert 0 < recorded["click_recorded_wins"] <= len(with_record)
    assert wins - recorded["click_recorded_wins"] <= len(buyable) - len(with_record)
    assert recorded["clicks"] <= 1 and result["auction"]["models"]["synthetic"]["clicks"] == 0
    (campaign,) = [c for c in result["campaigns"].values() if c["wins"]]
    assert (campaign["clicks"], campaign["click_recorded_wins"]) == (
        recorded["clicks"],
        recorded["click_recorded_wins"],
    )
    assert campaign["ctr"] == round(recorded["clicks"] / recorded["click_recorded_wins"], 6)
    if wins == len(buyable):  # nothing shed: every buyable row won
        assert (recorded["clicks"], recorded["click_recorded_wins"]) == (1, len(with_record))
    assert "wins with a recorded click" in replayed.stdout and "CTR" in replayed.stdout
    assert "clicks (recorded model)" in replayed.html
