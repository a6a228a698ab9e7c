"""A large import runs in constant memory: the importer's peak RSS does not grow with
the input.

Each import runs in its own Python process, which reports the high-water mark of its
own address space (``VmHWM``). Not ``wait4``'s ``ru_maxrss``: that keeps the peak from
before ``exec``, when the child was still a copy of the test process."""

from __future__ import annotations

import gzip
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from bidder.bidstream.stream import read_stream
from tests.bidder.bidstream.importers.ipinyou_rows import START, DatasetRow, raw_text, spaced

pytestmark = pytest.mark.long(12)

IMPORT_THEN_REPORT = """
import sys
from bidder.cli import main
code = main(sys.argv[1:])
status = open("/proc/self/status").read()
print(next(line for line in status.splitlines() if line.startswith("VmHWM:")))
sys.exit(code)
"""
SMALL_ROWS, LARGE_ROWS = 250, 30_000
CHUNK = 5_000
GAP_MS = 7
USER_AGENT = DatasetRow().useragent + " Toolbar/1.0 (compatible)" * 26
"""A row of about 870 bytes: the large input is over 25 MB in a quarter of the rows it
takes at the dataset's usual width. Each row costs the import its parse and write, and
what is measured is bytes held."""


def write_input(path: Path, rows: int) -> int:
    """A gzip raw-layout log of ``rows`` distinct rows; returns its uncompressed size."""
    size = 0
    template = DatasetRow(useragent=USER_AGENT)
    with gzip.open(path, "wt") as out:
        for start in range(0, rows, CHUNK):
            first = START + timedelta(milliseconds=GAP_MS * start)
            chunk = spaced([template] * min(CHUNK, rows - start), GAP_MS, first)
            varied = [
                replace(row, bidid=f"bid-{start + i}", ipinyouid=f"user-{(start + i) % 9973}")
                for i, row in enumerate(chunk)
            ]
            text = raw_text(varied)
            size += len(text.encode())
            out.write(text)
    return size


def peak_rss_bytes(bidsim_args: list[str]) -> int:
    """Run ``bidsim ARGS`` in a fresh process; its peak resident set size."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_THEN_REPORT, *bidsim_args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    kib = done.stdout.strip().splitlines()[-1].split()[1]  # "VmHWM:  101764 kB"
    return int(kib) * 1024


def import_peak(tmp_path: Path, name: str, rows: int) -> tuple[int, int, Path]:
    source, out = tmp_path / f"{name}.txt.gz", tmp_path / f"{name}.jsonl.gz"
    size = write_input(source, rows)
    peak = peak_rss_bytes(["import", "ipinyou", str(source), "--out", str(out), "--no-progress"])
    return size, peak, out


def test_a_large_import_needs_no_more_memory_than_a_small_one(tmp_path: Path) -> None:
    _, small_peak, _ = import_peak(tmp_path, "small", SMALL_ROWS)
    large_size, large_peak, out = import_peak(tmp_path, "large", LARGE_ROWS)
    assert large_size > 25_000_000
    growth = large_peak - small_peak
    # Holding the rows (or the output) in memory would grow by about the input's size.
    assert growth < large_size / 20, (
        f"peak RSS {small_peak:,} B, then {large_peak:,} B for {large_size:,} B of input"
    )
    offsets = [record.t_ms for record in read_stream(out)]
    assert offsets == [GAP_MS * i for i in range(LARGE_ROWS)]
