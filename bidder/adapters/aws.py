"""boto3 clients for the bidder's AWS endpoint (moto on loopback, or real AWS).

Every client fails fast: short connect/read timeouts and one retry, so an outage turns
into an error within seconds instead of a hung reconciler or loader. A loopback
endpoint gets explicit dummy credentials, so a developer's real AWS credentials are
never sent to (or needed by) the local moto server; any other endpoint uses the normal
boto3 credential chain.

boto3 clients are thread-safe but costly to build: build one per use site, once, and
keep it. Every client of a process comes from one boto3 session, built under a lock (a
session is not thread-safe): the session keeps the botocore models it has read, so a
further client takes ~3 ms where one on a session of its own read them again (~90 ms;
a bidder worker builds four at start-up). Calls block, so never make them on the event
loop thread.
"""

from __future__ import annotations

import contextlib
import ipaddress
import threading
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

_CONFIG = Config(
    connect_timeout=2,
    read_timeout=5,
    # "standard" counts the first call: two attempts in all.
    retries={"max_attempts": 2, "mode": "standard"},
)
_QUICK = Config(connect_timeout=0.5, read_timeout=1.0, retries={"max_attempts": 1})

_SESSION_LOCK = threading.Lock()
_session: boto3.session.Session | None = None
"""The process's one session, made by the first client (under ``_SESSION_LOCK``)."""


def is_loopback(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def aws_client(
    service: str, endpoint: str, region: str = "us-east-1", *, quick: bool = False
) -> BaseClient:
    """A fail-fast boto3 client for ``service`` (e.g. "dynamodb") at ``endpoint``.

    ``quick``: one attempt with sub-second timeouts, for calls whose answer is worthless
    when late (cache fills); the default retries once and waits seconds, right for loaders.
    """
    credentials = DUMMY_CREDENTIALS if is_loopback(endpoint) else {}
    global _session
    config = _QUICK if quick else _CONFIG
    with _SESSION_LOCK:
        if _session is None:
            _session = boto3.session.Session()
        client: BaseClient = _session.client(
            service, region_name=region, endpoint_url=endpoint, config=config, **credentials
        )
    return client


def load_models(services: Iterable[str]) -> None:
    """Read the botocore models of ``services`` into the process's session, calling
    nothing: a client is built for each on a loopback endpoint and dropped. A further
    client of the service, here or in a process forked from here, then skips reading
    them (the first client of a service reads its model files: 20-150 ms of CPU)."""
    for service in services:
        aws_client(service, "http://127.0.0.1:1")


def scan_items(client: BaseClient, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every item of a DynamoDB ``scan`` with ``params``, page after page (blocking)."""
    params = dict(params)
    while True:
        page = client.scan(**params)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]


@contextlib.contextmanager
def table_errors(
    client: Any, table_name: str, operation: str, error: type[Exception]
) -> Iterator[None]:
    """A boto3 failure inside becomes ``error``, naming the call, the table and the
    endpoint (one line for a user; the boto3 exception is its cause)."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        endpoint = client.meta.endpoint_url
        raise error(f"{operation} on table {table_name!r} at {endpoint} failed: {exc}") from exc
