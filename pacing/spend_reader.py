"""The spend stream's consumer: new records of every shard, from saved checkpoints.

Each ``read`` reads every shard of the stream in parallel threads, at most 100 pages
per shard, from where the last read stopped (or the shard's checkpoint in the spend
table, or the shard's start); ``commit`` saves how far it got. After a read,
``lag_ms`` is how far behind the stream's tip the consumer is: the stream's own figure
(``MillisBehindLatest``) of each shard's last page, the largest of them.

Calls block (boto3): use from the reconciler's own thread, never an event loop.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pacing.spend_table import SpendTable


class KinesisReader:
    """Reads new records from every shard of a stream, resuming at saved checkpoints."""

    def __init__(
        self, client: Any, stream: str, table: SpendTable, pool: ThreadPoolExecutor
    ) -> None:
        self._client = client
        self.stream = stream
        self._table = table
        self._pool = pool
        self._iterators: dict[str, str] = {}
        self.positions: dict[str, str] = {}
        """The last sequence number read per shard (saved by ``commit``)."""
        self.behind_ms: dict[str, int] = {}
        """Per shard, how far the last read ended behind the tip (``MillisBehindLatest``)."""

    @property
    def lag_ms(self) -> int:
        """How far behind the stream's tip the last read left the consumer (largest shard)."""
        return max(self.behind_ms.values(), default=0)

    def read(self) -> list[bytes]:
        shards = [s["ShardId"] for s in self._client.list_shards(StreamName=self.stream)["Shards"]]
        records: list[bytes] = []
        behind: dict[str, int] = {}
        for shard, (data, last, lag_ms) in zip(
            shards, self._pool.map(self._read_shard, shards), strict=True
        ):
            records += data
            behind[shard] = lag_ms
            if last is not None:
                self.positions[shard] = last
        self.behind_ms = behind
        return records

    def commit(self) -> None:
        for shard, sequence in self.positions.items():
            self._table.save_checkpoint(self.stream, shard, sequence)

    def _read_shard(self, shard: str) -> tuple[list[bytes], str | None, int]:
        """The shard's new records, the last one's sequence number, the lag at the end."""
        iterator = self._iterators.get(shard) or self._start(shard)
        data: list[bytes] = []
        last: str | None = None
        for _ in range(100):  # at most 100 pages a tick; the rest waits for the next one
            page = self._client.get_records(ShardIterator=iterator, Limit=10_000)
            iterator = page["NextShardIterator"]
            data += [r["Data"] for r in page["Records"]]
            if page["Records"]:
                last = page["Records"][-1]["SequenceNumber"]
            if not page["Records"] or not page.get("MillisBehindLatest"):
                break
        self._iterators[shard] = iterator
        return data, last, int(page.get("MillisBehindLatest") or 0)

    def _start(self, shard: str) -> str:
        saved = self.positions.get(shard) or self._table.checkpoint(self.stream, shard)
        where: dict[str, str] = {"ShardIteratorType": "TRIM_HORIZON"}
        if saved is not None:
            where = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": saved}
        answer = self._client.get_shard_iterator(StreamName=self.stream, ShardId=shard, **where)
        return str(answer["ShardIterator"])

    def forget_iterators(self) -> None:
        """After a failed tick: restart each shard from its checkpoint next time."""
        self._iterators.clear()
        self.positions.clear()
        self.behind_ms.clear()
