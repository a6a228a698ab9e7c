"""bidder.serve.settings: one frozen settings object, validated with every problem reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bidder.serve.settings import Settings, SettingsError

# One bad value per option, with the option name its problem must carry.
BAD: dict[str, tuple[str, Any]] = {
    "port": ("--port must", 70_000),
    "admin_port": ("--admin-port", -1),
    "workers": ("--workers", 0),
    "deadline_ms": ("--deadline-ms", 0.1),
    "network_allowance_ms": ("--network-allowance-ms", -1.0),
    "answer_margin_ms": ("--answer-margin-ms", 8.0),
    "shed_calm_ms": ("--shed-calm-ms", -1.0),
    "overload_margin_ms": ("--overload-margin-ms", 7.5),
    "max_body_bytes": ("--max-body-bytes", 100),
    "campaign_refresh_s": ("--campaign-refresh-s", 0.5),
    "campaigns_path": ("--campaigns", Path("/nonexistent/campaigns.json")),
    "valkey_url": ("--valkey", "http://127.0.0.1:6379"),
    "aws_endpoint": ("--aws-endpoint", "127.0.0.1:5000"),
    "public_url": ("--public-url", "ftp://bidder.example"),
    "spend_lag_threshold_s": ("--spend-lag-threshold-s", 0.0),
}


def _problems(settings: Settings) -> str:
    with pytest.raises(SettingsError) as caught:
        settings.validate()
    return str(caught.value)


def test_defaults_validate() -> None:
    settings = Settings()
    assert settings.validate() is settings


def test_validate_reports_every_problem_at_once() -> None:
    bad = Settings(**{field: value for field, (_, value) in BAD.items()})
    problems = _problems(bad)
    assert [option for option, _ in BAD.values() if option not in problems] == []


@pytest.mark.parametrize("field", BAD)
def test_a_bad_option_is_reported_by_its_name(field: str) -> None:
    option, value = BAD[field]
    assert option in _problems(Settings().replace(**{field: value}))


def test_bid_and_admin_ports_must_differ() -> None:
    assert "must differ" in _problems(Settings(port=9000, admin_port=9000))


def test_port_zero_may_be_used_for_both_ports() -> None:
    settings = Settings(port=0, admin_port=0)
    assert settings.validate() is settings


def test_existing_campaigns_file_validates(tmp_path: Path) -> None:
    path = tmp_path / "campaigns.json"
    path.write_text('{"version": 1, "campaigns": []}')
    settings = Settings(campaigns_path=path)
    assert settings.validate() is settings


@pytest.mark.parametrize(
    ("field", "url"),
    [
        ("valkey_url", "redis://127.0.0.1:6379"),
        ("valkey_url", "valkey://127.0.0.1:6379"),
        ("aws_endpoint", "http://127.0.0.1:5000"),
        ("public_url", "https://bidder.example"),
    ],
)
def test_url_with_an_accepted_scheme_validates(field: str, url: str) -> None:
    settings = Settings().replace(**{field: url})
    assert settings.validate() is settings


def test_notice_base_url_defaults_to_host_and_port() -> None:
    assert Settings(host="10.0.0.5", port=9090).notice_base_url == "http://10.0.0.5:9090"


def test_public_url_overrides_the_notice_base_url() -> None:
    settings = Settings(port=9090, public_url="https://bid.example")
    assert settings.notice_base_url == "https://bid.example"
