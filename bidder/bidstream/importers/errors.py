"""The two ways an input can be wrong: the whole file, or one line of it."""

from __future__ import annotations


class ImportInputError(ValueError):
    """A file cannot be imported at all (cannot be opened, wrong layout, corrupt gzip).

    The message names the file, and the line where there is one.
    """


class RowError(ValueError):
    """One line cannot be converted: skipped and counted under ``reason``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
