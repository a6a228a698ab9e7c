"""What an input format hands the import: one converted row, and the format's contract."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Row:
    request: dict[str, Any]
    """The OpenRTB BidRequest, as it will be sent."""
    ssp: str
    ts: int | None
    """The recorded time, epoch ms; None when the format has none (spread at a rate)."""
    market_price: float | None = None
    """The recorded clearing price, CPM in the request's currency."""
    click: bool | None = None


LineReader = Callable[[int, bytes], Row | None]
"""(line number, line) -> the row, or None for a line that holds no record (a header).

Raises RowError for a line it cannot convert (skipped and counted) and
ImportInputError when the file is not in the format at all (judged on its first line).
"""


class Format(Protocol):
    def reader(self, path: Path) -> LineReader:
        """A fresh reader for one file (the first line decides the file's layout)."""
        ...
