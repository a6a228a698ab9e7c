"""Supply-file caches: loaded from a directory or S3 (moto), refreshed, last good copy kept."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bidder.adapters.aws import aws_client
from bidder.supply.files import (
    EMPTY,
    DirectorySource,
    S3Source,
    SupplyCache,
    SupplyLoadError,
    load_files,
)
from tests.bidder.conftest import EXTERNAL, REPO

BUNDLED = REPO / "fixtures" / "openrtb" / "supply"
IAB = EXTERNAL / "supply"


def test_the_bundled_files_load_without_anything_skipped() -> None:
    files, report = load_files(DirectorySource(BUNDLED).items())
    assert (report.sellers_files, report.ads_txt_files, report.app_ads_txt_files) == (16, 249, 228)
    assert report.skipped == {} and report.ignored_keys == 0
    assert "beta-pub-news-1" in files.sellers["ssp-beta.example"].sellers
    assert files.ads_txt["news-1.example"].relationship("ssp-beta.example", "beta-pub-news-1")


def test_the_iab_examples_load_under_the_cache_layout() -> None:
    items = [(f"ads.txt/{p.stem}.txt", p.read_bytes()) for p in IAB.glob("ads.txt_*.txt")]
    items += [(f"app-ads.txt/{p.stem}.txt", p.read_bytes()) for p in IAB.glob("app-ads.txt_*")]
    items += [
        ("sellers/advertisingsystem.com.json", (IAB / name).read_bytes())
        for name in ("sellers.json_iab-spec-sample.INVALID-smart-quote.json.txt",)
    ]
    files, report = load_files(items)
    assert (report.sellers_files, report.ads_txt_files, report.app_ads_txt_files) == (1, 11, 2)
    assert len(files.sellers["advertisingsystem.com"].sellers) == 8
    assert report.skipped == {
        "sellers/advertisingsystem.com.json": (
            "typographic quotes replaced by ASCII quotes to parse",
        )
    }


def test_names_are_lower_case_and_other_keys_are_ignored() -> None:
    items = [
        ("ads.txt/News.Example.txt", b"ssp.example, 1, DIRECT\n"),
        ("README.md", b"hello"),
        ("ads.txt/.txt", b""),
        ("sellers/x.example.txt", b"{}"),
    ]
    files, report = load_files(items)
    assert list(files.ads_txt) == ["news.example"] and report.ignored_keys == 3


def test_no_supply_file_at_all_is_a_load_error() -> None:
    with pytest.raises(SupplyLoadError, match="no supply files"):
        load_files([("README.md", b"")])


def test_a_missing_directory_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(SupplyLoadError, match="does not exist"):
        load_files(DirectorySource(tmp_path / "nope").items())


# -- S3 (the session's moto server) --------------------------------------------------------------


@pytest.fixture
def s3(aws_endpoint: str) -> Iterator[Any]:
    client = aws_client("s3", aws_endpoint)
    yield client
    client.close()


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"supply-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="crawl/sellers/ssp.example.json", Body=b'{"sellers": []}')
    s3.put_object(Bucket=name, Key="crawl/ads.txt/news.example.txt", Body=b"ssp.example, 1, DIRECT")
    s3.put_object(Bucket=name, Key="other/ads.txt/elsewhere.example.txt", Body=b"x.com, 1, DIRECT")
    return name


def _empty_bucket(s3: Any, name: str) -> None:
    for obj in s3.list_objects_v2(Bucket=name).get("Contents", ()):
        s3.delete_object(Bucket=name, Key=obj["Key"])


@pytest.mark.asyncio
async def test_a_cache_loads_from_s3_under_a_prefix(s3: Any, bucket: str) -> None:
    cache = SupplyCache(S3Source(s3, bucket, "crawl/"))
    assert cache.files is EMPTY and not cache.loaded
    report = await cache.refresh()
    assert (report.sellers_files, report.ads_txt_files) == (1, 1) and cache.loaded
    assert cache.files.ads_txt["news.example"].relationship("ssp.example", "1") == "DIRECT"


@pytest.mark.asyncio
async def test_a_failed_refresh_keeps_the_last_good_copy(s3: Any, bucket: str) -> None:
    cache = SupplyCache(S3Source(s3, bucket, "crawl"))
    await cache.refresh()
    good = cache.files
    _empty_bucket(s3, bucket)
    s3.delete_bucket(Bucket=bucket)
    with pytest.raises(SupplyLoadError, match=bucket):
        await cache.refresh()
    assert cache.files is good


@pytest.mark.asyncio
async def test_an_emptied_source_keeps_the_last_good_copy(s3: Any, bucket: str) -> None:
    cache = SupplyCache(S3Source(s3, bucket, "crawl"))
    await cache.refresh()
    good = cache.files
    _empty_bucket(s3, bucket)
    with pytest.raises(SupplyLoadError, match="no supply files"):
        await cache.refresh()
    assert cache.files is good


@pytest.mark.asyncio
async def test_a_refresh_picks_up_changed_files(tmp_path: Path) -> None:
    (tmp_path / "ads.txt").mkdir()
    site = tmp_path / "ads.txt" / "news.example.txt"
    site.write_text("ssp.example, 1, RESELLER\n")
    cache = SupplyCache(DirectorySource(tmp_path))
    await cache.refresh()
    site.write_text("ssp.example, 1, DIRECT\n")
    await cache.refresh()
    assert cache.files.ads_txt["news.example"].relationship("ssp.example", "1") == "DIRECT"


# -- background refresh -------------------------------------------------------------------------


class _Ticks:
    """An injected sleep: lets ``keep_fresh`` loop ``rounds`` times, then stops it."""

    def __init__(self, rounds: int) -> None:
        self.left, self.intervals = rounds, []  # type: ignore[var-annotated]

    async def __call__(self, seconds: float) -> None:
        self.intervals.append(seconds)
        if self.left == 0:
            raise asyncio.CancelledError
        self.left -= 1


@pytest.mark.asyncio
async def test_keep_fresh_refreshes_on_its_interval(tmp_path: Path) -> None:
    (tmp_path / "ads.txt").mkdir()
    (tmp_path / "ads.txt" / "a.example.txt").write_text("ssp.example, 1, DIRECT\n")
    cache, ticks = SupplyCache(DirectorySource(tmp_path)), _Ticks(2)
    with pytest.raises(asyncio.CancelledError):
        await cache.keep_fresh(sleep=ticks)
    assert ticks.intervals == [3600.0, 3600.0, 3600.0] and cache.loaded


@pytest.mark.asyncio
async def test_keep_fresh_logs_a_failure_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache, ticks = SupplyCache(DirectorySource(tmp_path / "missing")), _Ticks(2)
    with caplog.at_level(logging.WARNING), pytest.raises(asyncio.CancelledError):
        await cache.keep_fresh(interval_s=5, sleep=ticks)
    assert len(ticks.intervals) == 3 and cache.files is EMPTY
    assert caplog.text.count("keeping the last good copy") == 2
