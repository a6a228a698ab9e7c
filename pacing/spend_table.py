"""Spend totals in DynamoDB, applied exactly once per ledger id: a thin, synchronous adapter.

One table (hash key ``pk``, string) holds four kinds of item:

- ``applied#<ledger_id>``: the ledger entry was applied (campaign, advertiser, cost, day);
- ``spend#<day>#<campaign>``: the campaign's spend that UTC day (``spent``, ``entries``);
- ``adv#<day>#<advertiser>``: the advertiser's spend that day;
- ``ckpt#<stream>#<shard>``: the last Kinesis sequence number applied from a shard.

Exactly once: each transaction puts the ``applied#`` items of up to 23 entries of one
campaign under ``attribute_not_exists(pk)`` and adds their sum to the campaign and
advertiser totals (25 items, DynamoDB's and moto's transaction limit). If an entry was
applied before, DynamoDB cancels the whole transaction and names the failed
conditions; those entries are dropped and the rest retried. So a replayed, duplicated
or reordered stream changes nothing twice, and a crash between applying and
checkpointing only replays entries that are then refused.

Calls block (boto3): use from the reconciler's own thread, never an event loop.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from bidder.adapters.aws import scan_items, table_errors
from bidder.core.ledger import LedgerEntry
from pacing.curves import day_of

DEFAULT_TABLE = "bidsim-spend"
_PER_TRANSACTION = 23


class SpendStoreError(Exception):
    """The spend table could not be read or written."""


class SpendTable:
    def __init__(self, client: Any, table_name: str = DEFAULT_TABLE) -> None:
        self._client = client
        self.table_name = table_name

    def ensure_table(self) -> None:
        with (
            self._errors("ensure_table"),
            contextlib.suppress(self._client.exceptions.ResourceInUseException),
        ):
            self._client.create_table(
                TableName=self.table_name,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            )
        with self._errors("ensure_table"):
            waiter = self._client.get_waiter("table_exists")
            waiter.wait(TableName=self.table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})

    def apply(self, entries: Iterable[LedgerEntry]) -> list[LedgerEntry]:
        """Apply entries not applied before; returns the ones applied by this call."""
        unique: dict[int, LedgerEntry] = {}
        for entry in entries:
            unique.setdefault(entry.ledger_id, entry)
        groups: dict[tuple[int, str, str], list[LedgerEntry]] = defaultdict(list)
        for entry in unique.values():
            groups[(day_of(entry.ts_ms), entry.campaign_id, entry.advertiser)].append(entry)
        fresh: list[LedgerEntry] = []
        with self._errors("apply"):
            for (day, campaign, advertiser), group in groups.items():
                for start in range(0, len(group), _PER_TRANSACTION):
                    batch = group[start : start + _PER_TRANSACTION]
                    fresh += self._apply_batch(day, campaign, advertiser, batch)
        return fresh

    def _apply_batch(
        self, day: int, campaign: str, advertiser: str, batch: list[LedgerEntry]
    ) -> list[LedgerEntry]:
        while batch:
            try:
                self._client.transact_write_items(
                    TransactItems=_transaction(self.table_name, day, campaign, advertiser, batch)
                )
                return batch
            except self._client.exceptions.TransactionCanceledException as exc:
                reasons = exc.response.get("CancellationReasons", [])
                applied = {
                    i
                    for i, reason in enumerate(reasons[: len(batch)])
                    if reason.get("Code") == "ConditionalCheckFailed"
                }
                if not applied:
                    raise
                batch = [e for i, e in enumerate(batch) if i not in applied]
        return []

    def campaign_totals(self, day: int, campaign_ids: Sequence[str]) -> dict[str, int]:
        """Spend per campaign that day (0 for a campaign with no spend item yet)."""
        found = self._get_many([f"spend#{day}#{c}" for c in campaign_ids])
        return {c: found.get(f"spend#{day}#{c}", 0) for c in campaign_ids}

    def advertiser_totals(self, day: int, advertisers: Sequence[str]) -> dict[str, int]:
        found = self._get_many([f"adv#{day}#{a}" for a in advertisers])
        return {a: found.get(f"adv#{day}#{a}", 0) for a in advertisers}

    def applied_sums(self, day: int) -> dict[str, int]:
        """Per advertiser, the sum of the applied entries of that day (a full scan)."""
        sums: dict[str, int] = defaultdict(int)
        with self._errors("applied_sums"):
            for item in self._scan():
                if item["pk"]["S"].startswith("applied#") and int(item["day"]["N"]) == day:
                    sums[item["advertiser"]["S"]] += int(item["cost"]["N"])
        return dict(sums)

    def checkpoint(self, stream: str, shard: str) -> str | None:
        with self._errors("checkpoint"):
            item = self._client.get_item(
                TableName=self.table_name, Key=_key(f"ckpt#{stream}#{shard}"), ConsistentRead=True
            ).get("Item")
        return None if item is None else str(item["seq"]["S"])

    def save_checkpoint(self, stream: str, shard: str, sequence: str) -> None:
        with self._errors("save_checkpoint"):
            self._client.put_item(
                TableName=self.table_name,
                Item={"pk": {"S": f"ckpt#{stream}#{shard}"}, "seq": {"S": sequence}},
            )

    def _get_many(self, keys: list[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        with self._errors("read totals"):
            for start in range(0, len(keys), 100):
                request = {
                    self.table_name: {
                        "Keys": [_key(k) for k in keys[start : start + 100]],
                        "ConsistentRead": True,
                    }
                }
                while request:
                    page = self._client.batch_get_item(RequestItems=request)
                    for item in page["Responses"].get(self.table_name, []):
                        found[item["pk"]["S"]] = int(item["spent"]["N"])
                    request = page.get("UnprocessedKeys") or {}
        return found

    def _scan(self) -> Iterator[dict[str, Any]]:
        params = {"TableName": self.table_name, "ConsistentRead": True}
        return scan_items(self._client, params)

    def _errors(self, operation: str) -> contextlib.AbstractContextManager[None]:
        return table_errors(self._client, self.table_name, operation, SpendStoreError)


def _key(pk: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": pk}}


def _transaction(
    table: str, day: int, campaign: str, advertiser: str, batch: list[LedgerEntry]
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"Put": _applied_put(table, day, e)} for e in batch]
    add = "ADD spent :s, entries :n"
    values = {":s": {"N": str(sum(e.cost_micros for e in batch))}, ":n": {"N": str(len(batch))}}
    campaign_values = {**values, ":a": {"S": advertiser}}
    items.append(
        _update(table, f"spend#{day}#{campaign}", add + " SET advertiser = :a", campaign_values)
    )
    items.append(_update(table, f"adv#{day}#{advertiser}", add, values))
    return items


def _applied_put(table: str, day: int, e: LedgerEntry) -> dict[str, Any]:
    return {
        "TableName": table,
        "Item": {
            "pk": {"S": f"applied#{e.ledger_id}"},
            "campaign": {"S": e.campaign_id},
            "advertiser": {"S": e.advertiser},
            "cost": {"N": str(e.cost_micros)},
            "day": {"N": str(day)},
        },
        "ConditionExpression": "attribute_not_exists(pk)",
    }


def _update(table: str, pk: str, expression: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "Update": {
            "TableName": table,
            "Key": _key(pk),
            "UpdateExpression": expression,
            "ExpressionAttributeValues": values,
        }
    }
