"""The ledger archive: S3 objects under Object Lock in compliance mode.

Each delivered spool segment becomes one object ``ledger/<yyyy-mm-dd>/<segment>.jsonl``
(one ledger entry per line), written once and kept for ``retention_days``:

- the bucket is created with Object Lock enabled (which also turns on versioning)
  and a default retention of COMPLIANCE mode for ``retention_days``; every object
  is also put with an explicit COMPLIANCE retain-until date. In compliance mode no
  one, not even the account root, can delete a locked version or shorten its
  retention until the date passes;
- every put is conditional (``If-None-Match: *``): a second put to the same key is
  refused, so a retry after a crash can't replace the archived segment. A refused
  put means "already archived" and counts as done.

Why a segment per object: the segment name is unique and deterministic, so a retry
writes the same key (idempotent), and objects stay few and large enough for S3.

boto3 blocks: call these methods off the event loop (the producer's AWS thread).
"""

from __future__ import annotations

import datetime as dt

from botocore.client import BaseClient
from botocore.exceptions import ClientError

DEFAULT_RETENTION_DAYS = 400
"""Longer than a year of disputes and audits; a setting, not a law."""


class LedgerArchive:
    def __init__(self, client: BaseClient, bucket: str, retention_days: int) -> None:
        if retention_days < 1:
            raise ValueError("retention_days must be at least 1")
        self._s3 = client
        self.bucket = bucket
        self._retention = dt.timedelta(days=retention_days)
        self._retention_days = retention_days

    def ensure_bucket(self) -> None:
        """Create the bucket with Object Lock and a compliance default, if it is missing."""
        try:
            self._s3.head_bucket(Bucket=self.bucket)
            return
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
                raise
        try:
            self._s3.create_bucket(Bucket=self.bucket, ObjectLockEnabledForBucket=True)
        except ClientError as exc:
            if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
        rule = {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": self._retention_days}}
        self._s3.put_object_lock_configuration(
            Bucket=self.bucket,
            ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": rule},
        )

    @staticmethod
    def key_for(segment: str, day: dt.date) -> str:
        return f"ledger/{day.isoformat()}/{segment}.jsonl"

    def put(self, key: str, body: bytes, now: dt.datetime) -> bool:
        """Archive ``body`` at ``key``; False when the key was already archived."""
        try:
            self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body,
                IfNoneMatch="*",
                ObjectLockMode="COMPLIANCE",
                ObjectLockRetainUntilDate=now + self._retention,
                ChecksumAlgorithm="SHA256",  # S3 wants a checksum on Object Lock puts
                ContentType="application/x-ndjson",
            )
        except ClientError as exc:
            if _code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
