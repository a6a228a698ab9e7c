"""Validation of JSON documents that reports every problem, never stopping at the first.

``Obj`` wraps one JSON object: its typed reads record a problem (named by field path)
in a shared ``Problems`` list and return a harmless placeholder instead of raising, so
a caller validates a whole document in one pass and rejects it if anything was found.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Sequence
from typing import Any


class Problems:
    """Collects problems under one prefix (say, a campaign) into a shared list."""

    __slots__ = ("out", "prefix")

    def __init__(self, prefix: str, out: list[str]) -> None:
        self.prefix, self.out = prefix, out

    def add(self, path: str, message: str) -> None:
        self.out.append(": ".join(part for part in (self.prefix, path, message) if part))


class Obj:
    """One JSON object under validation: typed reads that record problems, never raise.

    A failed read returns a harmless placeholder; the caller drops the document when
    any problem was recorded, so placeholders never escape.
    """

    __slots__ = ("doc", "p", "path", "valid")

    def __init__(self, doc: Any, path: str, p: Problems, fields: Collection[str]) -> None:
        self.path, self.p = path, p
        # Not an object: one problem, not one more per required field.
        self.valid = isinstance(doc, dict)
        if not self.valid:
            p.add(path, "must be an object")
            doc = {}
        for key in doc:
            if key not in fields:
                close = difflib.get_close_matches(str(key), fields, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                p.add(self.at(str(key)), f"unknown field{hint}")
        self.doc: dict[str, Any] = doc

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return self.doc.get(key) is not None

    def missing(self, key: str, message: str = "is required") -> None:
        if self.valid:
            self.p.add(self.at(key), message)

    def string(self, key: str, default: str | None = None, choices: Sequence[str] = ()) -> str:
        """A string field; required when no default is given (JSON null = absent)."""
        value = self.doc.get(key)
        if value is None:
            if default is None:
                self.missing(key)
            return default or ""
        return check_str(value, self.at(key), self.p, choices)

    def opt_string(self, key: str) -> str | None:
        value = self.doc.get(key)
        return None if value is None else check_str(value, self.at(key), self.p)

    def integer(self, key: str, minimum: int = 1, maximum: int | None = None) -> int:
        """A required integer field."""
        if not self.has(key):
            self.missing(key)
        return self.opt_integer(key, minimum, maximum) or 0

    def opt_integer(self, key: str, minimum: int = 1, maximum: int | None = None) -> int | None:
        value = self.doc.get(key)
        if value is None:
            return None
        return check_int(value, self.at(key), self.p, minimum, maximum)

    def array(self, key: str) -> list[tuple[str, Any]] | None:
        """(path, item) pairs of an array field, or None when it is absent."""
        value = self.doc.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            self.p.add(self.at(key), "must be an array")
            return []
        return [(f"{self.at(key)}[{n}]", item) for n, item in enumerate(value)]

    def strings(self, key: str) -> list[str]:
        return [check_str(v, path, self.p) for path, v in self.array(key) or ()]


def check_str(value: Any, path: str, p: Problems, choices: Sequence[str] = ()) -> str:
    if not isinstance(value, str) or not value:
        p.add(path, "must be a non-empty string")
        return ""
    if choices and value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        p.add(path, f"must be one of {allowed} (got {value!r})")
    return value


def check_int(value: Any, path: str, p: Problems, minimum: int, maximum: int | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        p.add(path, f"must be an integer (got {value!r})")
        return 0
    if value < minimum:
        p.add(path, f"must be at least {minimum:_} (got {value:_})")
    elif maximum is not None and value > maximum:
        p.add(path, f"must be at most {maximum:_} (got {value:_})")
    return value


def check_pattern(value: str, pattern: re.Pattern[str], path: str, p: Problems, what: str) -> str:
    if value and not pattern.fullmatch(value):
        p.add(path, f"{value!r} is not {what}")
    return value
