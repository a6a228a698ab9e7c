"""The bidder's command-line options (``serve`` and ``replay``) and their ``Settings``.

Defaults come from ``Settings`` itself, so the two never disagree; options are
grouped by the hot-path stage they tune. Parsing only converts text; every rule is
checked once, together, by ``Settings.validate``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from bidder.core.clock import SimClockError, SimTime, SystemClock
from bidder.decide.ratelimit import RateLimitError, RateLimits, parse_rate_limits
from bidder.serve.region_settings import RegionConfig, parse_stores
from bidder.serve.settings import Settings, SettingsError
from bidder.stack.local import LocalStack
from bidder.stack.regions import LocalRegions
from bidder.supply.path import PolicyError, parse_domains, parse_fees, parse_preference
from bidder.winloop.spend_stream import default_spool_dir, remove_empty_spool

_D = Settings()
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CAMPAIGNS = REPO_ROOT / "fixtures" / "openrtb" / "campaigns.json"


def add_stack_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--valkey", metavar="URL", help="use this Valkey instead of starting one")
    p.add_argument(
        "--valkey-cluster", action="store_true", help="--valkey is a Valkey Cluster node"
    )
    p.add_argument("--aws-endpoint", metavar="URL", help="use this AWS endpoint instead of moto")
    p.add_argument(
        "--local-cluster", type=int, default=0, metavar="N",
        help="start a local Valkey Cluster of N masters (3 or more) instead of one server",
    )  # fmt: skip
    p.add_argument(
        "--local-cluster-replicas", type=int, default=0, metavar="N",
        help="replicas per master of the local cluster (needs --local-cluster)",
    )  # fmt: skip
    g = p.add_argument_group("regions (docs/fcap.md, regions)")
    g.add_argument("--region", metavar="NAME", help="serve this region: count into its slots")
    g.add_argument(
        "--region-valkey", action="append", default=[], metavar="NAME=URL",
        help="a region's counter store (repeat for every region, this one included)",
    )  # fmt: skip
    g.add_argument(
        "--local-regions", metavar="A,B[,C]",
        help="start a counter store per region and the replicators between them",
    )  # fmt: skip
    g.add_argument("--fcap-home-reads", action="store_true",
                   help="read and count each person on their home region's store")  # fmt: skip
    g.add_argument("--replication-delay-ms", type=float, default=0.0, metavar="MS",
                   help="--local-regions: apply each replicated change this late")  # fmt: skip
    g.add_argument("--replication-loss", type=float, default=0.0, metavar="P",
                   help="--local-regions: share of replicated applies lost (retried)")  # fmt: skip


def add_bidder_options(p: argparse.ArgumentParser) -> None:
    add_stack_options(p)
    g = p.add_argument_group("service")
    g.add_argument("--host", default=_D.host)
    g.add_argument("--workers", type=int, default=_D.workers, help="worker processes")
    g.add_argument("--deadline-ms", type=float, default=_D.deadline_ms)
    g.add_argument("--network-allowance-ms", type=float, default=_D.network_allowance_ms)
    g.add_argument(
        "--answer-margin-ms",
        type=float,
        default=_D.answer_margin_ms,
        help="stages stop this long before the deadline, to write the answer by it",
    )
    g.add_argument("--max-body-bytes", type=int, default=_D.max_body_bytes)
    g.add_argument("--max-in-flight", type=int, default=_D.max_in_flight)
    g.add_argument(
        "--shed-lag-ms", type=float, help="shed past this loop lag (default: deadline/2)"
    )
    g.add_argument(
        "--shed-stay-lag-ms",
        type=float,
        default=_D.shed_stay_lag_ms,
        help="once shedding, keep shedding past this lower lag until calm",
    )
    g.add_argument(
        "--shed-calm-ms",
        type=float,
        default=_D.shed_calm_ms,
        help="a shedding worker is calm once its lag stayed under the lower bound this long",
    )
    g.add_argument(
        "--overload-margin-ms",
        type=float,
        default=_D.overload_margin_ms,
        help="until calm, stages stop this much earlier still (timers fire late then)",
    )
    g.add_argument(
        "--metrics-flush-s",
        type=float,
        default=_D.metrics_flush_s,
        help="how often workers publish their counts to /metrics (the most they lag)",
    )
    g.add_argument("--public-url", metavar="URL", help="base URL of notices (default: own)")
    g = p.add_argument_group("campaigns and eligibility")
    g.add_argument("--campaigns", type=Path, default=DEFAULT_CAMPAIGNS, metavar="FILE")
    g.add_argument("--campaign-refresh-s", type=float, default=_D.campaign_refresh_s)
    g.add_argument("--bid-on-test", action="store_true", help="bid on test=1 requests")
    g = p.add_argument_group("partner protection, consent, supply chain")
    g.add_argument(
        "--rate-limit", action="append", default=[], metavar="SSP=QPS[:BURST]",
        help="per-SSP token bucket, per worker (repeatable)",
    )  # fmt: skip
    g.add_argument("--rate-limit-default", metavar="QPS[:BURST]", help="bucket of other SSPs")
    g.add_argument("--tcf-vendor-id", type=int, default=_D.tcf_vendor_id)
    g.add_argument("--supply-dir", type=Path, default=_D.supply_dir, metavar="DIR")
    g.add_argument("--supply-s3", metavar="s3://BUCKET/PREFIX")
    g.add_argument("--supply-refresh-s", type=float, default=_D.supply_refresh_s)
    _add_money_options(p)
    _add_dedup_options(p)


def _add_dedup_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("supply-path dedup (one bid per source.tid)")
    g.add_argument(
        "--dedup-window-ms", type=int, default=_D.dedup_window_ms, metavar="MS",
        help="how long an auction's claim lives (0: no dedup)",
    )  # fmt: skip
    g.add_argument(
        "--dedup-hold-ms", type=float, default=_D.dedup_hold_ms, metavar="MS",
        help="on a path that is not top-ranked, claim no sooner than MS after receipt",
    )  # fmt: skip
    g.add_argument(
        "--dedup-claim-budget-ms", type=float, default=_D.dedup_claim_budget_ms, metavar="MS",
        help="an unanswered claim started this long before the deadline fails open (bids)",
    )  # fmt: skip
    g.add_argument(
        "--ssp-preference", default="", metavar="A,B,C", help="preferred SSPs, best first"
    )
    g.add_argument(
        "--ssp-fee-bps", action="append", default=[], metavar="SSP=BPS[,SSP=BPS]",
        help="an SSP's fee in basis points for the path rank (repeatable; default 0)",
    )  # fmt: skip
    g.add_argument(
        "--ssp-domain", action="append", default=[], metavar="SSP=DOMAIN[,SSP=DOMAIN]",
        help="an SSP's advertising system domain: hold a copy only when a better path"
        " through a listed SSP can exist (repeatable)",
    )  # fmt: skip


def _add_money_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("profiles, pacing, frequency caps, scoring")
    g.add_argument("--profile-miss", choices=("continue", "nobid"), default=_D.profile_miss)
    g.add_argument("--profile-ttl-s", type=float, default=_D.profile_ttl_s)
    g.add_argument(
        "--identity-graph", type=Path, metavar="FILE",
        help="caps count per person for the ids this graph knows (bidsim identity build)",
    )  # fmt: skip
    g.add_argument(
        "--identity-table", metavar="NAME",
        help="the same from the graph in this DynamoDB table (bidsim identity load), cached",
    )  # fmt: skip
    g.add_argument(
        "--identity-ttl-s", type=float, default=_D.identity_ttl_s, metavar="S",
        help="how long a worker keeps a table entry: a new version is seen within about S",
    )  # fmt: skip
    g.add_argument("--pacing-tick-s", type=float, default=_D.pacing_tick_s)
    g.add_argument(
        "--breaker-window-s", type=float, default=_D.breaker_window_s, metavar="S",
        help="the reconciler pauses a campaign spending above 3x its target for S seconds",
    )  # fmt: skip
    g.add_argument(
        "--spend-lag-threshold-s", type=float, default=_D.spend_lag_threshold_s, metavar="S",
        help="the reconciler grants no lease while the spend stream is over S seconds behind",
    )  # fmt: skip
    g.add_argument("--lease-refresh-s", type=float, default=_D.lease_refresh_s)
    g.add_argument(
        "--chunk-periods", type=int, metavar="N",
        help="lease chunk = daily budget / nodes / N (default 288; a --pacing-config file"
        " sets it instead)",
    )  # fmt: skip
    g.add_argument(
        "--budget-scale", type=float, default=_D.budget_scale, metavar="F",
        help="daily budgets x F (a stream holding 1/N of the supply: 1/N)",
    )  # fmt: skip
    g.add_argument(
        "--sim-clock", metavar="START_MS:SPEED[:AT_MS]",
        help="workers and reconciler on simulated wall time: START_MS at AT_MS (default now), "
        "then SPEED x real time; deadlines and timeouts stay real",
    )  # fmt: skip
    g.add_argument("--pacing-curves", type=Path, metavar="DIR")
    g.add_argument(
        "--pacing-config", type=Path, metavar="FILE",
        help="the reconciler's gains, chunk and default curve (bidsim pacing tune --out)",
    )  # fmt: skip
    g.add_argument("--no-reconciler", action="store_true", help="a reconciler runs elsewhere")
    g.add_argument("--fcap-check-timeout-ms", type=float, default=_D.fcap_check_timeout_ms)
    g.add_argument(
        "--fcap-replica-reads", action="store_true", help="cap checks read cluster replicas"
    )
    g.add_argument("--model-dir", type=Path, default=_D.model_dir, metavar="DIR")
    g.add_argument("--no-bid-shading", action="store_true", help="bid the value in 1st price")
    g = p.add_argument_group("notices and ledger")
    g.add_argument(
        "--notice-key", action="append", default=[], metavar="KID=SECRET",
        help="notice signing key (repeatable; the first signs unless --notice-key-id)",
    )  # fmt: skip
    g.add_argument("--notice-key-id", metavar="KID")
    g.add_argument("--notice-max-age-s", type=float, default=_D.notice_max_age_s)
    g.add_argument("--spool-dir", type=Path, metavar="DIR")


@contextlib.contextmanager
def local_stack(args: argparse.Namespace, settings: Settings) -> Iterator[LocalStack]:
    """The embedded servers the settings do not point elsewhere, started for the block
    (StackError explains).

    A moto started here lives on a port of its own, so the default spool named after it
    (``default_spool_dir``) serves no later run: once stopped, it is removed if empty.
    An entry left in it is kept."""
    stack = LocalStack(
        valkey_url=settings.valkey_url,
        aws_endpoint=settings.aws_endpoint,
        cluster=args.local_cluster,
        cluster_replicas=args.local_cluster_replicas,
    )
    with stack:
        own_spool = None
        if settings.aws_endpoint is None and settings.spool_dir is None:
            own_spool = default_spool_dir(settings.spend_stream, stack.aws_endpoint)
        try:
            yield stack
        finally:
            if own_spool is not None:
                remove_empty_spool(own_spool)


@contextlib.contextmanager
def local_regions(args: argparse.Namespace, settings: Settings) -> Iterator[Settings]:
    """``--local-regions``: start a counter store per region and the replicators
    between them; ``settings`` with their URLs (StackError or SettingsError explains)."""
    if not args.local_regions:
        yield settings
        return
    names = tuple(n.strip() for n in args.local_regions.split(","))
    region = settings.region or RegionConfig(names[0])
    if region.stores or region.name not in names:
        raise SettingsError(
            "invalid settings:\n  --local-regions starts every region's store: it takes no"
            f" --region-valkey, and --region must be one of {', '.join(names)}"
        )
    replication = [
        "--delay-ms",
        str(args.replication_delay_ms),
        "--loss",
        str(args.replication_loss),
    ]
    with LocalRegions(names, replicator_args=replication) as started:
        config = dataclasses.replace(region, stores=tuple(started.urls.items()))
        yield settings.replace(region=config).validate()


def on_stack(settings: Settings, stack: LocalStack) -> Settings:
    # --local-cluster already made the settings a cluster's (settings_from_args).
    return settings.replace(valkey_url=stack.valkey_url, aws_endpoint=stack.aws_endpoint)


def settings_from_args(args: argparse.Namespace, port: int, admin_port: int) -> Settings:
    """Settings for ``serve``/``replay``; SettingsError names every bad option."""
    preference, fees, domains = _path_policy(args)
    return Settings(
        host=args.host,
        port=port,
        admin_port=admin_port,
        workers=args.workers,
        deadline_ms=args.deadline_ms,
        network_allowance_ms=args.network_allowance_ms,
        answer_margin_ms=args.answer_margin_ms,
        max_body_bytes=args.max_body_bytes,
        max_in_flight=args.max_in_flight,
        shed_lag_ms=args.shed_lag_ms,
        shed_stay_lag_ms=args.shed_stay_lag_ms,
        shed_calm_ms=args.shed_calm_ms,
        overload_margin_ms=args.overload_margin_ms,
        metrics_flush_s=args.metrics_flush_s,
        public_url=args.public_url,
        campaigns_path=args.campaigns,
        campaign_refresh_s=args.campaign_refresh_s,
        bid_on_test=args.bid_on_test,
        valkey_url=args.valkey,
        valkey_cluster=args.valkey_cluster or args.local_cluster > 0,
        aws_endpoint=args.aws_endpoint,
        rate_limits=_rate_limits(args),
        tcf_vendor_id=args.tcf_vendor_id,
        supply_dir=args.supply_dir,
        supply_s3=args.supply_s3,
        supply_refresh_s=args.supply_refresh_s,
        profile_miss=args.profile_miss,
        profile_ttl_s=args.profile_ttl_s,
        identity_graph=args.identity_graph,
        identity_table=args.identity_table,
        identity_ttl_s=args.identity_ttl_s,
        pacing_tick_s=args.pacing_tick_s,
        breaker_window_s=args.breaker_window_s,
        spend_lag_threshold_s=args.spend_lag_threshold_s,
        lease_refresh_s=args.lease_refresh_s,
        pacing_curves=args.pacing_curves,
        pacing_config=args.pacing_config,
        reconciler=not args.no_reconciler,
        fcap_check_timeout_ms=args.fcap_check_timeout_ms,
        fcap_replica_reads=args.fcap_replica_reads,
        region=_region(args),
        model_dir=args.model_dir,
        bid_shading=not args.no_bid_shading,
        notice_keys=tuple(_key(spec) for spec in args.notice_key),
        notice_key_id=args.notice_key_id,
        notice_max_age_s=args.notice_max_age_s,
        spool_dir=args.spool_dir,
        dedup_window_ms=args.dedup_window_ms,
        dedup_hold_ms=args.dedup_hold_ms,
        dedup_claim_budget_ms=args.dedup_claim_budget_ms,
        ssp_preference=preference,
        ssp_fees_bps=fees,
        ssp_domains=domains,
        sim_clock=_sim_clock(args.sim_clock),
        budget_scale=args.budget_scale,
        chunk_periods=args.chunk_periods,
    ).validate()


_PolicyFields = tuple[tuple[str, ...], tuple[tuple[str, int], ...], tuple[tuple[str, str], ...]]


def _path_policy(args: argparse.Namespace) -> _PolicyFields:
    """(--ssp-preference, --ssp-fee-bps, --ssp-domain) as Settings fields; SettingsError
    names the option."""
    try:
        fees = parse_fees(args.ssp_fee_bps)
        domains = parse_domains(args.ssp_domain)
        return (
            parse_preference(args.ssp_preference),
            tuple(sorted(fees.items())),
            tuple(sorted(domains.items())),
        )
    except PolicyError as exc:
        raise SettingsError(f"invalid settings:\n  {exc}") from None


def _rate_limits(args: argparse.Namespace) -> RateLimits:
    try:
        return parse_rate_limits(args.rate_limit, args.rate_limit_default)
    except RateLimitError as exc:
        raise SettingsError(f"invalid settings:\n  {exc}") from None


def _sim_clock(text: str | None) -> SimTime | None:
    if text is None:
        return None
    try:
        return SimTime.parse(text, SystemClock().wall_ms())
    except SimClockError as exc:
        raise SettingsError(f"invalid settings:\n  {exc}") from None


def _region(args: argparse.Namespace) -> RegionConfig | None:
    if args.region is None and not args.region_valkey and not args.fcap_home_reads:
        return None
    if args.region is None:
        raise SettingsError(
            "invalid settings:\n  --region-valkey and --fcap-home-reads need --region"
        )
    try:
        stores = parse_stores(args.region_valkey)
    except ValueError as exc:
        raise SettingsError(f"invalid settings:\n  {exc}") from None
    return RegionConfig(args.region, stores, args.fcap_home_reads)


def _key(spec: str) -> tuple[str, str]:
    kid, sep, secret = spec.partition("=")
    if not sep:
        raise SettingsError("invalid settings:\n  --notice-key must be KID=SECRET")
    return kid, secret
