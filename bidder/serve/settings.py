"""The bidder's settings: one frozen object, validated once, every problem reported.

Settings come from the command line (``bidsim serve``); nothing on the hot path
reads the environment. ``validate`` collects every problem at once, naming the
option, so a misconfigured deployment is fixed in one round.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from bidder.core.clock import Clock, SimTime, SystemClock
from bidder.core.tokens import MIN_KEY_BYTES, check_kid
from bidder.decide.ratelimit import RateLimits
from bidder.serve.region_settings import RegionConfig, read_checks
from bidder.serve.settings_formats import BUCKET_NAME, KEY_NAMESPACE, STREAM_NAME, is_url
from bidder.supply.path import MAX_FEE_BPS, PathPolicy
from pacing.config_file import chunk_periods_in_force, pacing_problems

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL_DIR = REPO_ROOT / "models" / "artifact"
DEFAULT_SUPPLY_DIR = REPO_ROOT / "fixtures" / "openrtb" / "supply"
BUNDLED_SSP_DOMAINS = tuple(
    (f"ssp-{n}", f"ssp-{n}.example") for n in ("alpha", "beta", "gamma", "delta")
)
"""The SSPs of the world the bundled supply files describe (the generator's), with
their advertising system domains: the default ``ssp_domains`` with those files."""
PROFILE_MISS_POLICIES = ("continue", "nobid")


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
    answer_margin_ms: float = 0.5
    """Stages stop this long before the deadline, so the answer is written by it."""
    max_body_bytes: int = 256 * 1024
    """Cap on the request body, before and after gzip decoding."""
    max_in_flight: int = 256
    """Bid requests inside the handler at once; past it new ones are shed (204 overloaded)."""
    shed_lag_ms: float | None = None
    """Event-loop lag past which new bid requests are shed; default half the deadline."""
    shed_stay_lag_ms: float = 1.5
    """Once shedding, the lower lag past which a worker keeps shedding until it is calm:
    the bound at full pressure; answers in time raise it towards the shed lag
    (``bidder.decide.overload.LagShedder``)."""
    shed_calm_ms: float = 100.0
    """How long the lag must stay under the lower bound for a shedding worker to be calm."""
    metrics_flush_s: float = 1.0
    """How often a worker publishes its counts to the admin port's ``/metrics``: the most
    those figures lag (``bidder.core.published_metrics``)."""
    overload_margin_ms: float = 3.0
    """While a worker is shedding (not calm yet), its stages stop up to this much earlier
    still (the share its pressure says, ``bidder.decide.overload.LagShedder``): under
    overload a timer fires late by a loop iteration, and the answer must still be
    written by the deadline."""

    @property
    def shed_lag_s(self) -> float:
        return (self.shed_lag_ms if self.shed_lag_ms is not None else self.deadline_ms / 2) / 1000

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
    notice_keys: tuple[tuple[str, str], ...] = ()
    """Notice token keys as (key id, secret); every one verifies, the active one signs.
    Empty: each worker makes a random key (dev only: notices die with the worker)."""
    notice_key_id: str | None = None
    """The key id that signs new tokens; default the first of ``notice_keys``."""
    notice_max_age_s: float = 3600.0
    """Late-notice window: notices of bids older than this are refused (and counted)."""
    spend_stream: str = "bidsim-spend"
    spool_dir: Path | None = None
    """Ledger spool; default <tmp>/bidsim-spool/<stream>-<endpoint hash>."""
    archive_bucket: str = "bidsim-ledger"
    archive_retention_days: int = 400
    id_lease_ttl_s: float = 10.0
    """Snowflake worker-id lease time to live in Valkey; renewed 3 times per ttl."""
    id_max_backwards_ms: int = 100
    """A wall clock step back larger than this stops id issue until it catches up."""
    key_namespace: str = "bidsim"
    """Prefix of the Valkey keys of id leases and billing dedup."""
    sim_clock: SimTime | None = None
    """Wall time of every worker and the reconciler (``--sim-clock``); None: the real one."""
    chunk_periods: int | None = None
    """Lease chunk = daily budget / nodes / this (the reconciler's ``--chunk-periods``);
    None: the ``pacing_config`` file's, or the default. Not both (``lease_chunk_periods``)."""
    budget_scale: float = 1.0
    """Campaigns' daily budgets x this when loaded (a stream sampled 1/N: 1/N)."""

    def lease_chunk_periods(self) -> int:
        """The chunk periods the reconciler runs with: ``chunk_periods``, the file's, or 288."""
        return chunk_periods_in_force(self.chunk_periods, self.pacing_config)

    def clock(self) -> Clock:  # the workers' and the reconciler's
        return self.sim_clock.clock() if self.sim_clock is not None else SystemClock()

    @property
    def notice_base_url(self) -> str:
        return self.public_url or f"http://{self.host}:{self.port}"

    @property
    def active_notice_key_id(self) -> str | None:
        if self.notice_key_id is not None:
            return self.notice_key_id
        return self.notice_keys[0][0] if self.notice_keys else None

    def replace(self, **changes: object) -> Settings:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    # Stage 2: partner protection.
    rate_limits: RateLimits = field(default_factory=RateLimits)
    """Per-SSP token buckets (``--rate-limit SSP=QPS[:BURST]``); per worker process."""
    # Stage 3: consent.
    tcf_vendor_id: int = 999
    # Stage 4: supply chain.
    supply_dir: Path | None = DEFAULT_SUPPLY_DIR
    """sellers.json / ads.txt / app-ads.txt tree (``bidder.supply.files``)."""
    supply_s3: str | None = None
    """``s3://bucket/prefix`` to read the supply files from instead of ``supply_dir``."""
    supply_refresh_s: float = 3600.0
    # Stage 5: profiles.
    profiles_table: str = "bidsim-profiles"
    profile_miss: str = "continue"
    """'continue' without a profile, or 'nobid' (PROFILE_MISS) on a cache miss."""
    profile_ttl_s: float = 300.0
    profile_cache_size: int = 200_000
    identity_graph: Path | None = None
    """Caps count per person (cluster) for the ids this graph file knows."""
    identity_table: str | None = None
    """Or the graph in this table (``bidder.decide.identity_table``), through a cache."""
    identity_ttl_s: float = 60.0
    # Stage 6: pacing.
    pacing_tick_s: float = 5.0
    """The reconciler's tick; leases expire after two missed ticks."""
    lease_refresh_s: float = 1.0
    """How often a worker re-reads its leases (and heartbeats as a live node)."""
    pacing_curves: Path | None = None
    """Directory of named curves (NAME.json) for campaigns' ``pacing_curve``."""
    pacing_config: Path | None = None
    """The reconciler's gains, chunk and default curve (``bidsim pacing tune --out``)."""
    breaker_window_s: float = 60.0
    """The reconciler's circuit breaker: spend above 3x target for this long pauses."""
    spend_lag_threshold_s: float = 10.0
    """The reconciler grants no lease while the spend stream lags more than this."""
    spend_table: str = "bidsim-spend"
    reconciler: bool = True
    """Run the reconciler beside the workers (``bidsim serve``); off when one runs elsewhere."""
    # Stage 7: frequency capping.
    valkey_cluster: bool = False
    """``--valkey`` is a Valkey Cluster (any node's URL); keys are hash-tagged per user."""
    fcap_check_timeout_ms: float = 4.0
    """Bound on the cap check inside the request deadline (then the cap policy decides)."""
    fcap_cache_entries: int = 100_000
    fcap_replica_reads: bool = False
    """Read-only cap checks read a replica of the user's slot (Valkey Cluster); they may
    miss counts younger than the replication lag (docs/fcap.md, replica reads)."""
    region: RegionConfig | None = None  # --region: one region's counters among several
    # Stage 8: scoring.
    model_dir: Path = DEFAULT_MODEL_DIR
    bid_shading: bool = True
    model_reload_s: float = 30.0
    """How often a worker looks for a new model artifact (reload without restart)."""
    # Stage 8b: supply-path dedup (bidder.supply.path, bidder.pipeline.auction_claims).
    dedup_window_ms: int = 1000
    """Life of an auction's claim: copies of one ``source.tid`` within it bid once; 0: off."""
    dedup_hold_ms: float = 3.0
    """How long a bidding copy that is not top-ranked waits before it claims the auction,
    so a better path arriving meanwhile wins (cut to fit the deadline)."""
    dedup_claim_budget_ms: float = 2.0
    """A claim Valkey has not answered by the deadline fails open (bids) when it started
    at least this long before; a later one answers 204 deadline."""
    ssp_preference: tuple[str, ...] = ()
    """SSPs in order of preference for dedup; unlisted ones rank after them."""
    ssp_fees_bps: tuple[tuple[str, int], ...] = ()
    """(SSP, fee in basis points) for dedup's path rank; others 0."""
    ssp_domains: tuple[tuple[str, str], ...] = ()
    """(SSP, its advertising system domain): when given, a copy holds its claim only
    when a better path through one of these SSPs can exist (``bidder.supply.path``)."""

    @property
    def path_policy(self) -> PathPolicy:
        domains = self.ssp_domains
        if not domains and self.supply_s3 is None and self.supply_dir == DEFAULT_SUPPLY_DIR:
            domains = BUNDLED_SSP_DOMAINS
        return PathPolicy(self.ssp_preference, dict(self.ssp_fees_bps), dict(domains))

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
            (
                0 <= self.answer_margin_ms < self.deadline_ms,
                f"--answer-margin-ms must be 0 or more and below --deadline-ms ({self.deadline_ms})"
                f", got {self.answer_margin_ms}",
            ),
            (1024 <= self.max_body_bytes <= 16 << 20, "--max-body-bytes must be 1 KiB-16 MiB"),
            (1 <= self.max_in_flight <= 1_000_000, "--max-in-flight must be 1-1000000"),
            (
                self.shed_lag_ms is None or 0 < self.shed_lag_ms <= self.deadline_ms,
                "--shed-lag-ms must be above 0 and at most --deadline-ms",
            ),
            (
                0 < self.shed_stay_lag_ms <= self.shed_lag_s * 1000,
                f"--shed-stay-lag-ms must be above 0 and at most the shed lag"
                f" ({self.shed_lag_s * 1000:g} ms), got {self.shed_stay_lag_ms}",
            ),
            (
                0 <= self.shed_calm_ms <= 60_000,
                f"--shed-calm-ms must be 0-60000, got {self.shed_calm_ms}",
            ),
            (
                self.overload_margin_ms >= 0
                and self.answer_margin_ms + self.overload_margin_ms < self.deadline_ms,
                "--overload-margin-ms must be 0 or more and, with --answer-margin-ms, below"
                f" --deadline-ms ({self.deadline_ms}), got {self.overload_margin_ms}",
            ),
            (
                0.01 <= self.metrics_flush_s <= 60,
                f"--metrics-flush-s must be 0.01-60, got {self.metrics_flush_s}",
            ),
            (self.campaign_refresh_s >= 1, "--campaign-refresh-s must be at least 1"),
            (
                self.campaigns_path is None or self.campaigns_path.is_file(),
                f"--campaigns: no such file: {self.campaigns_path}",
            ),
            (
                is_url(self.valkey_url, ("redis", "rediss", "valkey")),
                "--valkey must be a redis:// URL",
            ),
            (
                is_url(self.aws_endpoint, ("http", "https")),
                "--aws-endpoint must be an http(s):// URL",
            ),
            (is_url(self.public_url, ("http", "https")), "--public-url must be an http(s):// URL"),
            *self._notice_checks(),
            *self._ledger_checks(),
            *self._stage_checks(),
            *self._dedup_checks(),
            *((False, p) for p in pacing_problems(self.chunk_periods, self.pacing_config)),
        ]

    def _stage_checks(self) -> list[tuple[bool, str]]:
        return [
            (1 <= self.tcf_vendor_id <= 0xFFFF, "--tcf-vendor-id must be 1-65535"),
            (
                self.supply_dir is None or self.supply_dir.is_dir(),
                f"--supply-dir: no such directory: {self.supply_dir}",
            ),
            (is_url(self.supply_s3, ("s3",)), "--supply-s3 must be an s3://bucket/prefix URL"),
            (self.supply_refresh_s >= 1, "--supply-refresh-s must be at least 1"),
            (
                self.profile_miss in PROFILE_MISS_POLICIES,
                f"--profile-miss must be one of {', '.join(PROFILE_MISS_POLICIES)}",
            ),
            (self.profile_ttl_s > 0, "--profile-ttl-s must be positive"),
            (self.profile_cache_size >= 1, "--profile-cache-size must be at least 1"),
            (
                self.identity_graph is None or self.identity_graph.is_file(),
                f"--identity-graph: no such file: {self.identity_graph}",
            ),
            (
                self.identity_graph is None or self.identity_table is None,
                "--identity-graph and --identity-table: give one, not both",
            ),
            (self.identity_ttl_s > 0, "--identity-ttl-s must be positive"),
            (0.05 <= self.pacing_tick_s <= 3600, "--pacing-tick-s must be 0.05-3600"),
            (self.breaker_window_s > 0, "--breaker-window-s must be above 0"),
            (0 < self.budget_scale <= 1_000, "--budget-scale must be above 0 and at most 1000"),
            (self.spend_lag_threshold_s >= 0.001, "--spend-lag-threshold-s must be at least 0.001"),
            (0.05 <= self.lease_refresh_s <= 60, "--lease-refresh-s must be 0.05-60"),
            (
                self.pacing_curves is None or self.pacing_curves.is_dir(),
                f"--pacing-curves: no such directory: {self.pacing_curves}",
            ),
            (
                0 < self.fcap_check_timeout_ms < self.deadline_ms,
                "--fcap-check-timeout-ms must be above 0 and below --deadline-ms",
            ),
            (self.fcap_cache_entries >= 1, "--fcap-cache-entries must be at least 1"),
            *read_checks(self.region, self.valkey_cluster, self.fcap_replica_reads),
            (self.model_dir.is_dir(), f"--model-dir: no such directory: {self.model_dir}"),
            (self.model_reload_s >= 1, "--model-reload-s must be at least 1"),
        ]

    def _dedup_checks(self) -> list[tuple[bool, str]]:
        names = [ssp for ssp, _ in self.ssp_fees_bps]
        domains = [ssp for ssp, _ in self.ssp_domains]
        return [
            (
                all(domains) and len(set(domains)) == len(domains),
                "--ssp-domain: SSP names must be non-empty and given once",
            ),
            (
                self.dedup_window_ms == 0 or 10 <= self.dedup_window_ms <= 60_000,
                "--dedup-window-ms must be 0 (off) or 10-60000",
            ),
            (
                0 <= self.dedup_hold_ms < self.deadline_ms,
                "--dedup-hold-ms must be 0 or more and below --deadline-ms",
            ),
            (
                0 < self.dedup_claim_budget_ms < self.deadline_ms,
                "--dedup-claim-budget-ms must be above 0 and below --deadline-ms",
            ),
            (
                all(self.ssp_preference)
                and len(set(self.ssp_preference)) == len(self.ssp_preference),
                "--ssp-preference: SSP names must be non-empty and listed once",
            ),
            (
                all(names) and len(set(names)) == len(names),
                "--ssp-fee-bps: SSP names must be non-empty and given once",
            ),
            (
                all(0 <= bps <= MAX_FEE_BPS for _, bps in self.ssp_fees_bps),
                f"--ssp-fee-bps: fees must be 0-{MAX_FEE_BPS} bps",
            ),
        ]

    def _notice_checks(self) -> list[tuple[bool, str]]:
        kids = [kid for kid, _ in self.notice_keys]
        active = self.active_notice_key_id
        return [
            (
                all(check_kid(kid) for kid in kids),
                "--notice-key: key ids must be 1-16 of A-Z a-z 0-9 _ -",
            ),
            (len(set(kids)) == len(kids), "--notice-key: key ids must be unique"),
            (
                all(len(secret.encode()) >= MIN_KEY_BYTES for _, secret in self.notice_keys),
                f"--notice-key: secrets must be at least {MIN_KEY_BYTES} bytes",
            ),
            (
                self.notice_key_id is None or self.notice_key_id in kids,
                f"--notice-key-id {self.notice_key_id!r} is not among the --notice-key ids",
            ),
            (active is None or bool(kids), "--notice-key-id needs --notice-key"),
            (10 <= self.notice_max_age_s <= 7 * 86400, "--notice-max-age-s must be 10 s-7 days"),
        ]

    def _ledger_checks(self) -> list[tuple[bool, str]]:
        return [
            (
                STREAM_NAME.fullmatch(self.spend_stream) is not None,
                "--spend-stream must be 1-128 of A-Z a-z 0-9 _ . -",
            ),
            (
                BUCKET_NAME.fullmatch(self.archive_bucket) is not None,
                "--archive-bucket must be an S3 bucket name (3-63 of a-z 0-9 . -)",
            ),
            (1 <= self.archive_retention_days <= 36500, "--archive-retention-days must be 1-36500"),
            (1 <= self.id_lease_ttl_s <= 300, "--id-lease-ttl-s must be 1-300"),
            (0 <= self.id_max_backwards_ms <= 10_000, "--id-max-backwards-ms must be 0-10000"),
            (
                KEY_NAMESPACE.fullmatch(self.key_namespace) is not None,
                "--key-namespace must be 1-32 of A-Z a-z 0-9 _ -",
            ),
        ]
