"""The identity graph: which ids are one person, so caps count people, not ids. Pure.

A graph maps a user key (``bidder.decide.identity``: ``b:``, ``i:``, ``e:``, ``x:``
keys) to a *cluster id* and a confidence in [0, 1]. Caps count per cluster
(``g:<cluster>``) when the graph knows the key with at least ``min_confidence``;
otherwise the request keeps its own key, and a campaign with a fallback policy caps
a key known with less confidence under a coarser one (``bidder.decide.identity``).

Versions, merges and splits. A graph has a version; the bidder holds one version at a
time and a new one replaces it whole. Counters live under the cluster key, so:

- **merge** (two clusters become one): the merged cluster keeps the id of one of them
  (``build_graph`` keeps the smallest); that cluster's counts go on, the other's are no
  longer read. Until the other's windows end, the person can be shown up to its count
  again: at most one limit's worth of over-delivery per cap, once per merge.
- **split** (one cluster becomes two): the part that keeps the id keeps the counts;
  the other starts at zero (at most one limit's worth again, once).
- a key that leaves the graph goes back to its own key, whose counter holds only the
  impressions counted under it before it joined the graph.

File format (JSON, one object): ``{"version": 3, "ids": {"<user key>": ["<cluster>",
<confidence>], ...}}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

CLUSTER_PREFIX = "g:"
DEFAULT_MIN_CONFIDENCE = 0.5


class Placer(Protocol):
    """Where caps count a user key: a graph held whole, or the identity table's cache."""

    def place(self, user_key: str) -> tuple[str, bool]: ...


def place_in(
    found: tuple[str, float] | None, user_key: str, min_confidence: float
) -> tuple[str, bool]:
    """(the key caps count under, whether the key is known with too little confidence),
    given what the graph holds for ``user_key`` (None: not in the graph)."""
    if found is None:
        return user_key, False
    if found[1] < min_confidence:
        return user_key, True
    return CLUSTER_PREFIX + found[0], False


class GraphFormatError(ValueError):
    """An identity-graph file is not in the documented format; names the file."""


@dataclass(frozen=True, slots=True)
class IdentityGraph:
    version: int
    ids: Mapping[str, tuple[str, float]] = field(default_factory=dict)
    """User key -> (cluster id, confidence)."""
    min_confidence: float = DEFAULT_MIN_CONFIDENCE

    def cap_key(self, user_key: str | None) -> str | None:
        """The key caps count under: the cluster's, when the graph is confident."""
        return None if user_key is None else self.place(user_key)[0]

    def place(self, user_key: str) -> tuple[str, bool]:
        """(the key caps count under, whether the graph knows ``user_key`` with less than
        ``min_confidence``). A key known with too little confidence keeps its own key;
        a campaign with a fallback policy caps it under the fallback key instead."""
        return place_in(self.ids.get(user_key), user_key, self.min_confidence)

    def to_doc(self) -> dict[str, Any]:
        return {"version": self.version, "ids": {k: list(v) for k, v in self.ids.items()}}


def build_graph(
    version: int, people: Iterable[Iterable[str]], confidence: float = 1.0
) -> IdentityGraph:
    """A graph of known people: each an iterable of their user keys.

    A key listed under two people joins them (a merge), the cluster named after the
    smallest key of the merged set, so rebuilding from the same people gives the same ids.
    """
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for person in people:
        keys = list(person)
        for key in keys:
            a, b = root(keys[0]), root(key)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return IdentityGraph(version, {key: (root(key), confidence) for key in parent})


def load_graph(path: Path, min_confidence: float = DEFAULT_MIN_CONFIDENCE) -> IdentityGraph:
    """Read a graph file; GraphFormatError names the file and the problem."""
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise GraphFormatError(f"{path}: cannot read: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise GraphFormatError(
            f"{path}: line {exc.lineno} column {exc.colno}: not valid JSON"
        ) from None
    return graph_from_doc(doc, str(path), min_confidence)


def graph_from_doc(doc: Any, source: str, min_confidence: float) -> IdentityGraph:
    if not isinstance(doc, dict) or set(doc) != {"version", "ids"}:
        raise GraphFormatError(f"{source}: must be an object with exactly 'version' and 'ids'")
    version, ids = doc["version"], doc["ids"]
    if type(version) is not int or version < 1 or not isinstance(ids, dict):
        raise GraphFormatError(f"{source}: 'version' must be a positive integer, 'ids' an object")
    entries: dict[str, tuple[str, float]] = {}
    for key, value in ids.items():
        entry = _entry(value)
        if entry is None:
            raise GraphFormatError(
                f"{source}: ids[{key!r}] must be [cluster id, confidence 0-1], not {value!r}"
            )
        entries[key] = entry
    return IdentityGraph(version, entries, min_confidence)


def _entry(value: Any) -> tuple[str, float] | None:
    if not isinstance(value, list) or len(value) != 2:
        return None
    cluster, score = value
    if not isinstance(cluster, str) or not cluster or type(score) not in (int, float):
        return None
    return (cluster, float(score)) if 0 <= score <= 1 else None
