"""Regional mode's settings (``bidsim serve --region NAME``; docs/fcap.md, regions).

Regions split one thing only: the frequency counters. Each region has its own
counter store (one Valkey server), and this process counts into its region's slots
and reads the merge of all regions' (``fcap.regional``). Budgets, pacing leases,
Snowflake ids and notice dedup stay global on ``--valkey``.
"""

from __future__ import annotations

from dataclasses import dataclass

from bidder.serve.settings_formats import is_url
from fcap.regions import name_problem


@dataclass(frozen=True, slots=True)
class RegionConfig:
    name: str
    """The region this process serves (counts into its slots)."""
    stores: tuple[tuple[str, str], ...] = ()
    """(region, Valkey URL of its counter store) for every region; filled by the local
    stack when it starts the regions (``--local-regions``)."""
    home_reads: bool = False
    """Read and count each person on their home region's store (``fcap.regions.home_region``)."""

    @property
    def urls(self) -> dict[str, str]:
        return dict(self.stores)


def parse_stores(specs: list[str]) -> tuple[tuple[str, str], ...]:
    """``--region-valkey NAME=URL`` values; ValueError naming a malformed one."""
    out = []
    for spec in specs:
        name, sep, url = spec.partition("=")
        if not sep or not name or not url:
            raise ValueError(f"--region-valkey must be NAME=URL, got {spec!r}")
        out.append((name, url))
    return tuple(out)


def read_checks(
    config: RegionConfig | None, cluster: bool, replica_reads: bool
) -> list[tuple[bool, str]]:
    """Where cap checks read, as ``Settings`` checks (each: ok, message): replica reads
    need a Cluster; regions need a store per region named, and no replica reads."""
    replicas = (
        cluster or not replica_reads,
        "--fcap-replica-reads needs a Valkey Cluster (--valkey-cluster or --local-cluster)",
    )
    if config is None:
        return [replicas]
    names = [name for name, _ in config.stores]
    bad_names = [p for p in (name_problem(n) for n in [config.name, *names]) if p]
    return [
        replicas,
        (not bad_names, "--region: " + "; ".join(bad_names)),
        (len(set(names)) == len(names), f"--region-valkey names a region twice: {names}"),
        (
            not config.stores or config.name in names,
            f"--region {config.name}: no --region-valkey {config.name}=URL for it",
        ),
        (
            all(is_url(url, ("redis", "rediss", "valkey")) for _, url in config.stores),
            "--region-valkey URLs must be redis:// URLs",
        ),
        (not replica_reads, "--fcap-replica-reads can't be combined with --region"),
    ]
