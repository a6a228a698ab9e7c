"""The identity graph as a DynamoDB table, read by the bid path through an in-process cache.

Layout (hash key ``k``, the same schema as the profile table): one item per user key,
``{"k": S key, "c": S cluster, "s": N confidence, "v": N graph version}``, and one
version item ``{"k": "#version", "v": N}`` saying which version is current.

Loading a version (``IdentityTable.load``) writes every item of the new version, then
moves the version item forward (refused unless the new version is higher). A reader
asks for the version item in the same ``BatchGetItem`` as its user keys, so every
answer is judged against the version current at that read: an item older than the
current version is a key the new version dropped, read as "not in the graph". Items
are written in place, so while a load runs a key may already show its new cluster:
the same mix of old and new a worker sees anyway while its cached entries expire.

Stage 5 reads the table through ``FillCache`` (``bidder.decide.profile_cache``): a miss
never waits, the request caps under its own key this time, and the key's entry is
there for the next request. Entries live ``ttl_s`` whether found or absent, so a
worker sees a new version at most ``ttl_s`` + one batch window + one read after the
version item moved.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from boto3.dynamodb.table import BatchWriter

from bidder.adapters.aws import table_errors
from bidder.core import metrics
from bidder.decide.identity_graph import DEFAULT_MIN_CONFIDENCE, IdentityGraph, place_in
from bidder.decide.profile_cache import CacheMetrics, FillCache
from bidder.decide.profiles import MAX_BATCH_KEYS, ProfileTable

log = logging.getLogger(__name__)

VERSION_KEY = "#version"
"""The version item's key; no user key starts with '#' (``bidder.decide.identity``)."""
MAX_USER_KEYS = MAX_BATCH_KEYS - 1
"""User keys per read: the version item takes one of the batch's slots."""

Entry = tuple[str, float]
"""(cluster id, confidence)."""

IDENTITY_METRICS = CacheMetrics(
    "identity",
    metrics.IDENTITY_LOOKUPS,
    metrics.IDENTITY_FILLS,
    metrics.IDENTITY_FILL_CALLS,
    metrics.IDENTITY_FILL_LATENCY,
)


class IdentityStoreError(Exception):
    """The identity table could not be read or written; the message names it."""


def item_of(key: str, entry: Entry, version: int) -> dict[str, Any]:
    """A user key's item in DynamoDB's wire format."""
    cluster, confidence = entry
    return {
        "k": {"S": key},
        "c": {"S": cluster},
        "s": {"N": repr(float(confidence))},
        "v": {"N": str(version)},
    }


def entry_of(item: Mapping[str, Any], current: int) -> Entry | None:
    """What an item says under the ``current`` version: its entry, or None when the item
    is older (the key left the graph). Raises ValueError for a malformed item."""
    try:
        version = int(item["v"]["N"])
        cluster, confidence = item["c"]["S"], float(Decimal(item["s"]["N"]))
    except (KeyError, TypeError, ArithmeticError) as exc:
        raise ValueError(f"malformed identity item: {exc!r}") from None
    if not cluster or not 0 <= confidence <= 1:
        raise ValueError("identity item needs a cluster and a confidence 0-1")
    return None if version < current else (cluster, confidence)


class IdentityTable:
    """The identity graph in DynamoDB (module doc)."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self.table_name = table_name

    def ensure_table(self) -> None:
        """Create the table if missing (the profile table's schema: hash key ``k``)."""
        ProfileTable(self._client, self.table_name).ensure_table()

    def current_version(self) -> int | None:
        """The version readers see, or None when no graph was ever loaded (or no table)."""
        with self._errors("current_version"):
            try:
                answer = self._client.get_item(
                    TableName=self.table_name, Key={"k": {"S": VERSION_KEY}}, ConsistentRead=True
                )
            except self._client.exceptions.ResourceNotFoundException:
                return None
        item = answer.get("Item")
        return None if item is None else int(item["v"]["N"])

    def load(self, graph: IdentityGraph) -> int:
        """Write ``graph`` as a new version, then make it current; returns the items written.

        Raises ValueError when the version is not above the current one (a load is a
        versioned change: readers must be able to tell it from the one before).
        """
        if VERSION_KEY in graph.ids:
            raise ValueError(f"{VERSION_KEY!r} is reserved and cannot be a user key")
        current = self.current_version()
        if current is not None and graph.version <= current:
            raise ValueError(
                f"table {self.table_name!r} holds version {current}: "
                f"a new version must be above it, got {graph.version}"
            )
        with self._errors("load"), _batch_writer(self.table_name, self._client) as batch:
            for key, entry in graph.ids.items():
                batch.put_item(Item=item_of(key, entry, graph.version))
        with self._errors("load"):
            self._client.put_item(
                TableName=self.table_name,
                Item={"k": {"S": VERSION_KEY}, "v": {"N": str(graph.version)}},
                # a lower version never becomes current (two loads at once are unsupported)
                ConditionExpression="attribute_not_exists(k) OR v < :new",
                ExpressionAttributeValues={":new": {"N": str(graph.version)}},
            )
        return len(graph.ids)

    def get_many(self, keys: Sequence[str]) -> dict[str, Entry | None]:
        """One ``BatchGetItem`` for at most ``MAX_USER_KEYS`` keys, with the version item.

        Like ``ProfileTable.get_many``: every processed key maps to its entry or None;
        unprocessed keys and malformed items (logged) are left out. When the version item
        itself went unprocessed the whole answer is empty: nothing can be judged.
        """
        distinct = [k for k in dict.fromkeys(keys) if k != VERSION_KEY]
        if len(distinct) > MAX_USER_KEYS:
            raise ValueError(f"at most {MAX_USER_KEYS} keys per batch, got {len(distinct)}")
        if not distinct:
            return {}
        wanted = [{"k": {"S": key}} for key in [VERSION_KEY, *distinct]]
        with self._errors("get_many"):
            answer = self._client.batch_get_item(RequestItems={self.table_name: {"Keys": wanted}})
        unprocessed = answer.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
        skipped = {item["k"]["S"] for item in unprocessed}
        if VERSION_KEY in skipped:
            return {}
        items = {i["k"]["S"]: i for i in answer.get("Responses", {}).get(self.table_name, [])}
        version_item = items.pop(VERSION_KEY, None)
        if version_item is None:  # nothing loaded yet: no key is in the graph
            return {k: None for k in distinct if k not in skipped}
        current = int(version_item["v"]["N"])
        result: dict[str, Entry | None] = {k: None for k in distinct if k not in skipped}
        for key, item in items.items():
            try:
                result[key] = entry_of(item, current)
            except ValueError as exc:
                result.pop(key, None)
                log.warning("identity %r in table %r: %s", key, self.table_name, exc)
        return result

    def _errors(self, operation: str) -> contextlib.AbstractContextManager[None]:
        return table_errors(self._client, self.table_name, operation, IdentityStoreError)


def _batch_writer(table_name: str, client: Any) -> BatchWriter:
    # The low-level client is fine: the items are already in DynamoDB's wire format.
    return BatchWriter(table_name, client)


class CachedGraph:
    """Stage 5's placer for ``--identity-table``: the graph as the cache knows it now.

    A miss (the cache is filling the key) and a key the graph does not hold both cap
    under the request's own key.
    """

    def __init__(
        self, cache: FillCache[Entry], min_confidence: float = DEFAULT_MIN_CONFIDENCE
    ) -> None:
        self.cache = cache
        self._min_confidence = min_confidence

    def place(self, user_key: str) -> tuple[str, bool]:
        return place_in(self.cache.lookup(user_key).value, user_key, self._min_confidence)
