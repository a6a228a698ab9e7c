"""Campaign documents in a DynamoDB table: a thin, synchronous adapter.

The table mirrors a campaign file: one item per campaign, ``{"id": S, "doc": S,
"updated_ms": N}``, where ``doc`` is the campaign as canonical JSON (orjson, sorted
keys). This module does not know the campaign format; it stores already validated,
JSON-able dicts that each carry a string ``"id"``, and gives them back.

``replace_all`` writes every document first and only then deletes the stale ids, so a
reader in between sees old and new campaigns, never an empty table. Reads are
strongly consistent so a bidder reloading right after a write sees that write.

Calls block for milliseconds (boto3): never on the event loop thread or the hot path.
Every boto3 failure surfaces as ``StoreError`` with a readable message.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
from boto3.dynamodb.table import BatchWriter

from bidder.adapters.aws import scan_items, table_errors
from bidder.core.clock import Clock, SystemClock

DEFAULT_TABLE = "bidsim-campaigns"
_NAMES = {"#id": "id", "#doc": "doc"}
Doc = dict[str, Any]


class StoreError(Exception):
    """The campaign table could not be read or written."""


class CampaignTable:
    def __init__(
        self,
        client: Any,
        table_name: str = DEFAULT_TABLE,
        clock: Clock | None = None,
        scan_page_size: int | None = None,
    ) -> None:
        """``client``: a DynamoDB client (see ``bidder.adapters.aws.aws_client``).

        ``scan_page_size`` caps the items per scan page (DynamoDB ``Limit``); None lets
        DynamoDB fill 1 MB pages.
        """
        self._client = client
        self.table_name = table_name
        self._clock = clock or SystemClock()
        self._page_size = scan_page_size

    def ensure_table(self) -> None:
        """Create the on-demand table if it is missing and wait until it is ACTIVE."""
        with self._errors("ensure_table"):
            # Describe first: a deployment allowed to read but not create tables still works.
            if not self._table_exists():
                self._create_table()
            waiter = self._client.get_waiter("table_exists")
            # The default waiter polls every 20 s; a new on-demand table is quick.
            waiter.wait(TableName=self.table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})

    def _table_exists(self) -> bool:
        try:
            self._client.describe_table(TableName=self.table_name)
        except self._client.exceptions.ResourceNotFoundException:
            return False
        return True

    def _create_table(self) -> None:
        # ResourceInUse: another process created it since we looked; that is fine.
        with contextlib.suppress(self._client.exceptions.ResourceInUseException):
            self._client.create_table(
                TableName=self.table_name,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            )

    def replace_all(self, docs: list[Doc]) -> None:
        """Make the table hold exactly ``docs``: put every doc, then delete stale ids."""
        ids = _ids_of(docs)
        with self._errors("replace_all"):
            stale = self._scan_ids() - set(ids)
            now_ms = str(self._clock.wall_ms())
            # The low-level client is fine here: the items are already in DynamoDB's
            # wire format, so BatchWriter's usual resource-side conversion is not needed.
            with BatchWriter(self.table_name, self._client) as batch:
                for doc_id, doc in zip(ids, docs, strict=True):
                    batch.put_item(Item=_item(doc_id, doc, now_ms))
            with BatchWriter(self.table_name, self._client) as batch:
                for doc_id in sorted(stale):
                    batch.delete_item(Key={"id": {"S": doc_id}})

    def scan_docs(self) -> list[Doc]:
        """Every stored document, decoded, sorted by id."""
        with self._errors("scan_docs"):
            items = list(self._scan("#id, #doc"))
        try:
            pairs = [(item["id"]["S"], orjson.loads(item["doc"]["S"])) for item in items]
        except (KeyError, orjson.JSONDecodeError) as exc:
            raise StoreError(f"table {self.table_name!r} holds a malformed item: {exc}") from exc
        return [doc for _, doc in sorted(pairs, key=lambda pair: pair[0])]

    def _scan_ids(self) -> set[str]:
        return {item["id"]["S"] for item in self._scan("#id")}

    def _scan(self, projection: str) -> Iterator[dict[str, Any]]:
        """All items, page by page, following ``LastEvaluatedKey``."""
        params: dict[str, Any] = {
            "TableName": self.table_name,
            "ConsistentRead": True,
            "ProjectionExpression": projection,
            # Placeholders keep attribute names clear of DynamoDB's reserved words.
            "ExpressionAttributeNames": {k: v for k, v in _NAMES.items() if k in projection},
        }
        if self._page_size is not None:
            params["Limit"] = self._page_size
        return scan_items(self._client, params)

    def _errors(self, operation: str) -> contextlib.AbstractContextManager[None]:
        return table_errors(self._client, self.table_name, operation, StoreError)


def _ids_of(docs: list[Doc]) -> list[str]:
    """Each doc's id; a missing, non-string or repeated id is the caller's bug."""
    ids = [doc.get("id") for doc in docs]
    bad = [i for i, doc_id in enumerate(ids) if not isinstance(doc_id, str) or not doc_id]
    if bad:
        raise ValueError(f"campaign docs at positions {bad} have no string 'id'")
    repeated = sorted(str(doc_id) for doc_id, n in Counter(ids).items() if n > 1)
    if repeated:
        raise ValueError(f"campaign ids appear more than once: {repeated}")
    return [str(doc_id) for doc_id in ids]


def _item(doc_id: str, doc: Doc, now_ms: str) -> dict[str, dict[str, str]]:
    body = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode()
    return {"id": {"S": doc_id}, "doc": {"S": body}, "updated_ms": {"N": now_ms}}
