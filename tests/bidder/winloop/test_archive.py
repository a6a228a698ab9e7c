"""bidder.winloop.archive against moto: Object Lock in compliance mode keeps the ledger
as written."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from bidder.adapters.aws import aws_client
from bidder.winloop.archive import LedgerArchive

# Object Lock judges retention by the server's real clock, so "now" must be real here.
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
KEY = LedgerArchive.key_for("0001767225600000-1-abcd", dt.date(2026, 1, 1))


@pytest.fixture
def archive(aws_endpoint: str) -> LedgerArchive:
    archive = LedgerArchive(aws_client("s3", aws_endpoint), f"ledger-{uuid.uuid4().hex[:12]}", 30)
    archive.ensure_bucket()
    return archive


def _s3(archive: LedgerArchive) -> Any:
    return archive._s3


def _versions(archive: LedgerArchive) -> list[dict[str, Any]]:
    versions: list[dict[str, Any]] = (
        _s3(archive).list_object_versions(Bucket=archive.bucket, Prefix=KEY).get("Versions", [])
    )
    return versions


def test_bucket_has_compliance_object_lock_by_default(archive: LedgerArchive) -> None:
    config = _s3(archive).get_object_lock_configuration(Bucket=archive.bucket)
    rule = config["ObjectLockConfiguration"]["Rule"]["DefaultRetention"]
    assert (rule["Mode"], rule["Days"]) == ("COMPLIANCE", 30)


def test_ensure_bucket_twice_is_harmless(archive: LedgerArchive) -> None:
    archive.ensure_bucket()


def test_archived_object_is_locked_in_compliance_mode_until_retention_ends(
    archive: LedgerArchive,
) -> None:
    archive.put(KEY, b"entry\n", NOW)
    head = _s3(archive).head_object(Bucket=archive.bucket, Key=KEY)
    assert head["ObjectLockMode"] == "COMPLIANCE"
    assert head["ObjectLockRetainUntilDate"] == NOW + dt.timedelta(days=30)


def test_a_second_put_to_an_archived_key_is_refused(archive: LedgerArchive) -> None:
    first = archive.put(KEY, b"entry\n", NOW)
    second = archive.put(KEY, b"rewritten\n", NOW)
    body = _s3(archive).get_object(Bucket=archive.bucket, Key=KEY)["Body"].read()
    assert (first, second, body) == (True, False, b"entry\n")


def test_an_unconditional_overwrite_leaves_the_locked_version_intact(
    archive: LedgerArchive,
) -> None:
    archive.put(KEY, b"entry\n", NOW)
    [original] = _versions(archive)
    _s3(archive).put_object(Bucket=archive.bucket, Key=KEY, Body=b"rewritten\n")
    kept = _s3(archive).get_object(Bucket=archive.bucket, Key=KEY, VersionId=original["VersionId"])
    assert kept["Body"].read() == b"entry\n"


def test_deleting_a_locked_version_is_refused(archive: LedgerArchive) -> None:
    archive.put(KEY, b"entry\n", NOW)
    [version] = _versions(archive)
    with pytest.raises(ClientError, match="AccessDenied"):
        _s3(archive).delete_object(Bucket=archive.bucket, Key=KEY, VersionId=version["VersionId"])


def test_even_a_governance_bypass_cannot_delete_a_compliance_version(
    archive: LedgerArchive,
) -> None:
    archive.put(KEY, b"entry\n", NOW)
    [version] = _versions(archive)
    with pytest.raises(ClientError, match="AccessDenied"):
        _s3(archive).delete_object(
            Bucket=archive.bucket,
            Key=KEY,
            VersionId=version["VersionId"],
            BypassGovernanceRetention=True,
        )


def test_keys_are_per_day_and_segment() -> None:
    assert KEY == "ledger/2026-01-01/0001767225600000-1-abcd.jsonl"
