"""The bidder's settings: one frozen object, validated once, every problem reported.

Settings come from the command line (``bidsim serve``); nothing on the hot path
reads the environment. ``validate`` collects every problem at once, naming the
option, so a misconfigured deployment is fixed in one round.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path


class SettingsError(ValueError):
    """One or more settings are wrong; the message lists each, by option name."""


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    admin_port: int = 8081
    workers: int = 1
    deadline_ms: float = 8.0
    """Hard internal deadline, from receipt to the last byte of the answer."""
    network_allowance_ms: float = 20.0
    """The deadline is never later than the request's tmax minus this allowance."""
    max_body_bytes: int = 256 * 1024
    """Cap on the request body, before and after gzip decoding."""
    campaigns_path: Path | None = None
    campaign_refresh_s: float = 30.0
    valkey_url: str | None = None
    aws_endpoint: str | None = None
    aws_region: str = "us-east-1"
    campaigns_table: str = "bidsim-campaigns"
    bid_on_test: bool = False
    seat: str = "bidsim"
    public_url: str | None = None
    """Base URL the exchange uses for win/billing notices; default http://host:port."""

    @property
    def notice_base_url(self) -> str:
        return self.public_url or f"http://{self.host}:{self.port}"

    def replace(self, **changes: object) -> Settings:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def validate(self) -> Settings:
        """Return self when valid; raise SettingsError listing every problem."""
        problems = [msg for check, msg in self._checks() if not check]
        if problems:
            raise SettingsError("invalid settings:\n  " + "\n  ".join(problems))
        return self

    def _checks(self) -> list[tuple[bool, str]]:
        return [
            (0 <= self.port <= 65535, f"--port must be 0-65535, got {self.port}"),
            (0 <= self.admin_port <= 65535, f"--admin-port must be 0-65535, got {self.admin_port}"),
            (self.port == 0 or self.port != self.admin_port, "--port and --admin-port must differ"),
            (1 <= self.workers <= 64, f"--workers must be 1-64, got {self.workers}"),
            (
                0.5 <= self.deadline_ms <= 1000,
                f"--deadline-ms must be 0.5-1000, got {self.deadline_ms}",
            ),
            (self.network_allowance_ms >= 0, "--network-allowance-ms must not be negative"),
            (1024 <= self.max_body_bytes <= 16 << 20, "--max-body-bytes must be 1 KiB-16 MiB"),
            (self.campaign_refresh_s >= 1, "--campaign-refresh-s must be at least 1"),
            (
                self.campaigns_path is None or self.campaigns_path.is_file(),
                f"--campaigns: no such file: {self.campaigns_path}",
            ),
            (
                _is_url(self.valkey_url, ("redis", "rediss", "valkey")),
                "--valkey must be a redis:// URL",
            ),
            (
                _is_url(self.aws_endpoint, ("http", "https")),
                "--aws-endpoint must be an http(s):// URL",
            ),
            (_is_url(self.public_url, ("http", "https")), "--public-url must be an http(s):// URL"),
        ]


def _is_url(value: str | None, schemes: tuple[str, ...]) -> bool:
    return value is None or any(value.startswith(f"{scheme}://") for scheme in schemes)
