"""Regional mode's settings: every problem named, from Settings and from the command line."""

from __future__ import annotations

import pytest

from bidder.cli import main
from bidder.serve.region_settings import RegionConfig
from bidder.serve.settings import Settings, SettingsError

EU, US = ("eu", "redis://127.0.0.1:7001"), ("us", "redis://127.0.0.1:7002")


def _problems(region: RegionConfig, **changes: object) -> str:
    with pytest.raises(SettingsError) as caught:
        Settings(region=region).replace(**changes).validate()
    return str(caught.value)


def test_a_region_with_a_store_for_each_region_validates() -> None:
    assert Settings(region=RegionConfig("eu", (EU, US))).validate()


@pytest.mark.parametrize(
    ("region", "named"),
    [
        (RegionConfig("EU!", (EU,)), "region name 'EU!'"),
        (RegionConfig("ap", (EU, US)), "--region ap: no --region-valkey ap=URL"),
        (RegionConfig("eu", (EU, EU)), "names a region twice"),
        (RegionConfig("eu", (("eu", "http://x"),)), "--region-valkey URLs must be redis://"),
    ],
)
def test_a_bad_region_setting_is_named(region: RegionConfig, named: str) -> None:
    assert named in _problems(region)


def test_replica_reads_and_regions_do_not_mix() -> None:
    problems = _problems(RegionConfig("eu", (EU,)), fcap_replica_reads=True, valkey_cluster=True)
    assert "--fcap-replica-reads can't be combined with --region" in problems


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--region-valkey", "eu=redis://127.0.0.1:1"], "need --region"),
        (["--region", "eu", "--region-valkey", "eu"], "--region-valkey must be NAME=URL"),
        (["--region", "ap", "--local-regions", "eu,us"], "--region must be one of eu, us"),
    ],
)
def test_serve_names_a_bad_region_option_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    code = main(["serve", *argv])
    err = capsys.readouterr().err
    assert code == 2 and named in err and "Traceback" not in err
