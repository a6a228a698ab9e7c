"""Reading an input file line by line, gzip or plain, with the bytes consumed so far.

The progress of a gzip file is measured on the compressed bytes read from disk, so a
progress bar over the files' sizes on disk ends at 100% for both kinds.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from bidder.bidstream.importers.errors import ImportInputError

GZIP_MAGIC = b"\x1f\x8b"


def numbered_lines(path: Path, on_bytes: Callable[[int], None]) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its newline); ``on_bytes(n)`` after n more bytes of disk.

    Raises ImportInputError naming the file when it cannot be opened and, naming the last
    good line, when a gzip stream turns out corrupt or truncated.
    """
    raw = _open(path)
    with raw:
        src: Iterable[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if _is_gzip(raw) else raw
        done, lineno = 0, 0
        try:
            for lineno, line in enumerate(src, start=1):
                yield lineno, line.rstrip(b"\r\n")
                if lineno % 1024 == 0:
                    done = _report(raw, done, on_bytes)
        except (OSError, EOFError, zlib.error) as exc:
            raise ImportInputError(f"{path}: unreadable after line {lineno} ({exc})") from None
        _report(raw, done, on_bytes)


def _open(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except IsADirectoryError:
        raise ImportInputError(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise ImportInputError(f"{path}: cannot open ({exc.strerror or exc})") from None


def _is_gzip(raw: BinaryIO) -> bool:
    """By content, not by name: logs are often gzip-compressed under any name."""
    magic = raw.read(2)
    raw.seek(0)
    return magic == GZIP_MAGIC


def _report(raw: BinaryIO, done: int, on_bytes: Callable[[int], None]) -> int:
    position = raw.tell()
    if position > done:
        on_bytes(position - done)
    return position
