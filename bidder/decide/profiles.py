"""User profiles: what the DSP knows about a user, its JSON document, and the DynamoDB
table that holds one per user key. The bid path reads them through the in-process cache
in ``bidder.decide.profile_cache`` and never waits for the table.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson
from boto3.dynamodb.table import BatchWriter

from bidder.adapters.aws import table_errors

log = logging.getLogger(__name__)

DEFAULT_TABLE = "bidsim-profiles"
MAX_BATCH_KEYS = 100
"""DynamoDB's limit on the keys of one ``BatchGetItem``."""
MISS_POLICIES = ("continue", "nobid")
"""What stage 5 does on a cache miss: go on without a profile, or no-bid (PROFILE_MISS)."""


@dataclass(frozen=True, slots=True)
class Profile:
    """What the DSP knows about a user; the model reads it (``models.features``)."""

    segments: frozenset[int]
    """Interest segments as IAB tier-1 category numbers (13 is 'Personal Finance')."""
    last_click_ms: int | None
    """Epoch ms of the user's last ad click, None if none in the last 30 days."""
    clicks_30d: int


def profile_to_doc(profile: Profile) -> dict[str, Any]:
    return {
        "segments": sorted(profile.segments),
        "last_click_ms": profile.last_click_ms,
        "clicks_30d": profile.clicks_30d,
    }


def profile_from_doc(doc: Any) -> Profile:
    """Decode a stored profile; raises ValueError when the document is malformed."""
    if not isinstance(doc, dict):
        raise ValueError("a profile must be a JSON object")
    segments, last, clicks = doc.get("segments"), doc.get("last_click_ms"), doc.get("clicks_30d")
    if not isinstance(segments, list) or not all(_is_int(s) for s in segments):
        raise ValueError("profile segments must be a list of integers")
    if last is not None and not _is_int(last):
        raise ValueError("profile last_click_ms must be an integer or null")
    if not _is_int(clicks) or clicks < 0:
        raise ValueError("profile clicks_30d must be a non-negative integer")
    return Profile(frozenset(segments), last, clicks)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------------------ the table


class ProfileStoreError(Exception):
    """The profile table could not be read or written."""


class ProfileTable:
    """Profiles in DynamoDB, one item per user key: ``{"k": S, "p": S (JSON)}``."""

    def __init__(self, client: Any, table_name: str = DEFAULT_TABLE) -> None:
        self._client = client
        self.table_name = table_name

    def ensure_table(self) -> None:
        """Create the on-demand table if it is missing and wait until it is ACTIVE."""
        with self._errors("ensure_table"):
            try:
                self._client.describe_table(TableName=self.table_name)
            except self._client.exceptions.ResourceNotFoundException:
                with contextlib.suppress(self._client.exceptions.ResourceInUseException):
                    self._client.create_table(
                        TableName=self.table_name,
                        BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                    )
            waiter = self._client.get_waiter("table_exists")
            waiter.wait(TableName=self.table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})

    def put_many(self, profiles: Iterable[tuple[str, Profile]]) -> int:
        """Write (user key, profile) pairs in batches of 25; returns the count."""
        count = 0
        with self._errors("put_many"), self._batch_writer() as batch:
            for key, profile in profiles:
                body = orjson.dumps(profile_to_doc(profile)).decode()
                batch.put_item(Item={"k": {"S": key}, "p": {"S": body}})
                count += 1
        return count

    def get_many(self, keys: Sequence[str]) -> dict[str, Profile | None]:
        """One ``BatchGetItem`` for at most ``MAX_BATCH_KEYS`` distinct keys.

        The answer holds every key DynamoDB processed: its profile, or None when the
        table has no item. Keys DynamoDB left unprocessed are absent (no retry: the cache
        fills them on a later miss), and so is a malformed item's key, logged: one bad
        item must not spoil its batch. Raises ValueError for too many keys and
        ProfileStoreError when the call fails.
        """
        distinct = list(dict.fromkeys(keys))  # DynamoDB refuses a batch with duplicates
        if len(distinct) > MAX_BATCH_KEYS:
            raise ValueError(f"at most {MAX_BATCH_KEYS} keys per batch, got {len(distinct)}")
        if not distinct:
            return {}
        request = {self.table_name: {"Keys": [{"k": {"S": key}} for key in distinct]}}
        with self._errors("get_many"):
            answer = self._client.batch_get_item(RequestItems=request)
        unprocessed = answer.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
        skipped = {item["k"]["S"] for item in unprocessed}
        result: dict[str, Profile | None] = {k: None for k in distinct if k not in skipped}
        for item in answer.get("Responses", {}).get(self.table_name, []):
            key = item["k"]["S"]
            try:
                result[key] = profile_from_doc(orjson.loads(item["p"]["S"]))
            except (KeyError, TypeError, ValueError) as exc:
                result.pop(key, None)
                log.warning("profile %r in table %r is malformed: %s", key, self.table_name, exc)
        return result

    def _batch_writer(self) -> BatchWriter:
        # The low-level client is fine: the items are already in DynamoDB's wire format.
        return BatchWriter(self.table_name, self._client)

    def _errors(self, operation: str) -> contextlib.AbstractContextManager[None]:
        return table_errors(self._client, self.table_name, operation, ProfileStoreError)
