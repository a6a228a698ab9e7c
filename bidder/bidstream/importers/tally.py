"""What an import read, wrote and skipped, and why: the summary the user sees."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES = 5
"""How many skipped lines are named with file, line and detail."""


@dataclass(slots=True)
class ImportTally:
    files: int = 0
    lines: int = 0
    """Every line read, blank and header lines included."""
    written: int = 0
    blank: int = 0
    headers: int = 0
    late: int = 0
    """Lines whose recorded time is before an earlier line's: sent in file order, at the
    previous line's offset (``ts`` stays as recorded)."""
    with_price: int = 0
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)
    examples: list[str] = field(default_factory=list)
    """The first ``EXAMPLES`` skipped lines: ``file:line: detail``."""

    def skip(self, path: Path, lineno: int, reason: str, detail: str) -> None:
        self.skipped[reason] += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(f"{path}:{lineno}: {detail}")

    def render(self, out: Path) -> str:
        """A few lines for the terminal."""
        skipped = sum(self.skipped.values())
        lines = [
            f"read {self.lines:,} lines from {self.files} file(s);"
            f" wrote {self.written:,} requests to {out}",
            f"  with a recorded market price  {self.with_price:,}",
            f"  header and blank lines        {self.headers + self.blank:,}",
            f"  sent out of recorded order    {self.late:,}"
            "  (time before an earlier line's: sent at that line's offset)",
            f"skipped {skipped:,}",
        ]
        lines += [f"  {reason:<28}{count:>10,}" for reason, count in self.skipped.most_common()]
        if self.examples:
            lines.append("first skipped lines:")
            lines += [f"  {example}" for example in self.examples]
        return "\n".join(lines)
