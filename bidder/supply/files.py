"""The supply-file caches: sellers.json, ads.txt and app-ads.txt, kept fresh off the bid path.

A crawler (not part of bidsim) stores the files it fetched under one root, a directory
or an S3 prefix, in this layout::

    sellers/<advertising system domain>.json    e.g. sellers/ssp-alpha.example.json
    ads.txt/<site domain>.txt                   e.g. ads.txt/news-1.example.txt
    app-ads.txt/<app bundle>.txt                e.g. app-ads.txt/com.example.game1.txt

Names are matched lower case; other keys are ignored. ``SupplyCache.refresh`` reads
and parses everything in a worker thread (file or boto3 I/O never runs on the event
loop), builds a new ``SupplyFiles`` of plain dicts and swaps it in with one attribute
store, so the bid path reads ``cache.files`` without a lock and never waits: lookups
are dict probes. A refresh that fails (source unreachable, root missing, no supply
file at all) raises and leaves the last good copy in place; ``keep_fresh`` runs
refreshes forever (default hourly) and logs failures. A file that is malformed is
not a failure: its parser keeps what it can and the report counts what it skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bidder.supply.ads_txt import parse_ads_txt
from bidder.supply.schain import SupplyFiles
from bidder.supply.sellers_json import parse_sellers_json

log = logging.getLogger(__name__)

DEFAULT_REFRESH_S = 3600.0
_KINDS = {"sellers": ".json", "ads.txt": ".txt", "app-ads.txt": ".txt"}
EMPTY = SupplyFiles(sellers={}, ads_txt={}, app_ads_txt={})


class SupplyLoadError(Exception):
    """The supply files could not be read; the message says where and why."""


@dataclass(frozen=True, slots=True)
class LoadReport:
    sellers_files: int = 0
    ads_txt_files: int = 0
    app_ads_txt_files: int = 0
    ignored_keys: int = 0
    skipped: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Per file key, what its parser skipped (only files with something skipped)."""


class SupplySource(Protocol):
    def items(self) -> Iterable[tuple[str, bytes]]:
        """(key relative to the root, content) of every stored file; blocking."""
        ...


class DirectorySource:
    def __init__(self, root: Path) -> None:
        self.root = root

    def items(self) -> Iterator[tuple[str, bytes]]:
        if not self.root.is_dir():
            raise SupplyLoadError(f"supply directory {self.root} does not exist")
        for path in sorted(self.root.rglob("*")):
            if path.is_file():
                yield path.relative_to(self.root).as_posix(), path.read_bytes()


class S3Source:
    """Files under ``prefix`` in ``bucket``, through a boto3 S3 client (``bidder.adapters.aws``)."""

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self._client, self.bucket = client, bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def items(self) -> Iterator[tuple[str, bytes]]:
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for obj in page.get("Contents", ()):
                    body = self._client.get_object(Bucket=self.bucket, Key=obj["Key"])["Body"]
                    yield obj["Key"][len(self.prefix) :], body.read()
        except SupplyLoadError:
            raise
        except Exception as exc:  # botocore raises many types; all mean "not readable now"
            raise SupplyLoadError(f"s3://{self.bucket}/{self.prefix}: {exc}") from exc


def load_files(items: Iterable[tuple[str, bytes]]) -> tuple[SupplyFiles, LoadReport]:
    """Parse every supply file in ``items``; raises SupplyLoadError when there is none."""
    tables: dict[str, dict[str, Any]] = {kind: {} for kind in _KINDS}
    skipped: dict[str, tuple[str, ...]] = {}
    ignored = 0
    for key, content in items:
        kind, name = _classify(key)
        if kind is None:
            ignored += 1
            continue
        parsed = parse_sellers_json(content) if kind == "sellers" else parse_ads_txt(content)
        tables[kind][name] = parsed
        if parsed.skipped:
            skipped[key] = parsed.skipped
    if not any(tables.values()):
        raise SupplyLoadError("no supply files (sellers/*.json, ads.txt/*.txt, app-ads.txt/*.txt)")
    files = SupplyFiles(
        sellers=tables["sellers"], ads_txt=tables["ads.txt"], app_ads_txt=tables["app-ads.txt"]
    )
    report = LoadReport(
        sellers_files=len(files.sellers),
        ads_txt_files=len(files.ads_txt),
        app_ads_txt_files=len(files.app_ads_txt),
        ignored_keys=ignored,
        skipped=skipped,
    )
    return files, report


def _classify(key: str) -> tuple[str | None, str]:
    """(kind, lower-case name) of a key, or (None, '') for anything else."""
    folder, _, filename = key.lower().rpartition("/")
    suffix = _KINDS.get(folder)
    if suffix is None or not filename.endswith(suffix) or len(filename) == len(suffix):
        return None, ""
    return folder, filename[: -len(suffix)]


Sleep = Callable[[float], Awaitable[None]]


class SupplyCache:
    """The current supply files for the bid path: read ``files``; never blocks."""

    def __init__(self, source: SupplySource) -> None:
        self._source = source
        self.files: SupplyFiles = EMPTY
        self.report = LoadReport()
        self.loaded = False
        """True once a refresh has succeeded."""

    async def refresh(self) -> LoadReport:
        """Reload everything in a thread; raises SupplyLoadError, keeping the last good copy."""
        files, report = await asyncio.to_thread(self._load)
        self.files, self.report, self.loaded = files, report, True
        return report

    def _load(self) -> tuple[SupplyFiles, LoadReport]:
        try:
            return load_files(self._source.items())
        except SupplyLoadError:
            raise
        except OSError as exc:
            raise SupplyLoadError(str(exc)) from exc

    async def keep_fresh(
        self, interval_s: float = DEFAULT_REFRESH_S, sleep: Sleep = asyncio.sleep
    ) -> None:
        """Refresh every ``interval_s`` forever; a failure is logged, the last copy stays."""
        while True:
            await sleep(interval_s)
            try:
                report = await self.refresh()
            except SupplyLoadError as exc:
                log.warning("supply files refresh failed, keeping the last good copy: %s", exc)
                continue
            log.info(
                "supply files refreshed: %d sellers.json, %d ads.txt, %d app-ads.txt",
                report.sellers_files,
                report.ads_txt_files,
                report.app_ads_txt_files,
            )
