"""The import loop: files in, one bidstream out, in constant memory.

Each line is read, converted by the format, placed on the timeline and written before
the next is read; only counters and the first few skipped lines are kept. The output is
written under a temporary name beside the target and renamed when the import is
complete, so a failed import never leaves a half-written stream under the real name.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bidder.bidstream.importers.errors import ImportInputError, RowError
from bidder.bidstream.importers.rows import Format
from bidder.bidstream.importers.source import numbered_lines
from bidder.bidstream.importers.tally import ImportTally
from bidder.bidstream.importers.timing import Timeline
from bidder.bidstream.stream import encode_record, write_stream


def import_files(
    paths: Sequence[Path],
    out: Path,
    fmt: Format,
    timeline: Timeline,
    progress: bool = False,
) -> ImportTally:
    """Convert ``paths`` in order into the bidstream ``out`` (gzip when it ends in .gz).

    Raises ImportInputError for a file that cannot be read at all; nothing is written
    to ``out`` then.
    """
    if not out.parent.is_dir():
        raise ImportInputError(f"{out}: the directory {out.parent} does not exist")
    tally = ImportTally()
    partial = out.with_name(f".{out.name}.partial{_gz(out)}")
    total = sum(_size(path) for path in paths)
    bar = tqdm(total=total, unit="B", unit_scale=True, file=sys.stderr, disable=not progress)
    with bar, _removed_on_failure(partial):
        write_stream(partial, _lines(paths, fmt, timeline, tally, bar))
        os.replace(partial, out)
    return tally


def _lines(
    paths: Sequence[Path], fmt: Format, timeline: Timeline, tally: ImportTally, bar: tqdm[Any]
) -> Iterator[bytes]:
    for path in paths:
        tally.files += 1
        read = fmt.reader(path)
        for lineno, line in numbered_lines(path, bar.update):
            tally.lines += 1
            if not line.strip():
                tally.blank += 1
                continue
            try:
                row = read(lineno, line)
            except RowError as exc:
                tally.skip(path, lineno, exc.reason, exc.detail)
                continue
            if row is None:
                tally.headers += 1
                continue
            t_ms, ts, late = timeline.place(row.ts)
            tally.late += late
            tally.with_price += row.market_price is not None
            tally.written += 1
            yield encode_record(
                t_ms,
                ts,
                row.ssp,
                request=row.request,
                market_price=row.market_price,
                click=row.click,
            )


@contextlib.contextmanager
def _removed_on_failure(path: Path) -> Iterator[None]:
    try:
        yield
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _gz(out: Path) -> str:
    return ".gz" if out.name.endswith(".gz") else ""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # the reader names the problem when it reaches the file
