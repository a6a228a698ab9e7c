"""``bidsim train`` and ``bidsim profiles load``: argparse wiring and handlers.

``add_commands(subparsers)`` adds both to the ``bidsim`` parser; each handler takes the
parsed arguments and returns the exit status. Bad input is one line on stderr naming
the problem and status 2, never a traceback; a model that does not beat the trivial
baseline is not written (status 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from bidder.adapters.aws import aws_client
from bidder.bidstream.stream import StreamFormatError, read_stream
from bidder.core.campaign_docs import load_campaign_file
from bidder.core.campaigns import CampaignError
from bidder.core.clock import SystemClock
from bidder.decide.identity import identify
from bidder.decide.profiles import DEFAULT_TABLE, ProfileStoreError, ProfileTable
from bidder.openrtb.request import InvalidRequest, parse_bid_request
from models.logs import LogError, impressions, read_log, win_outcomes, write_log
from models.scorer import DEFAULT_DIR, ArtifactError
from models.synth import synth_profile
from models.train import TrainConfig, dataset, fit, write_artifact
from models.win_rate import WinRateModel

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CAMPAIGNS = REPO_ROOT / "fixtures" / "openrtb" / "campaigns.json"
SAMPLE_STREAM = REPO_ROOT / "fixtures" / "openrtb" / "sample-stream.jsonl.gz"
_ERRORS = (
    ArtifactError,
    CampaignError,
    LogError,
    ProfileStoreError,
    StreamFormatError,
    ValueError,
    OSError,
)


def add_commands(subparsers: Any) -> None:
    """Register ``train`` and ``profiles`` on the ``bidsim`` subparsers."""
    _train_parser(subparsers.add_parser("train", help="learn P(click) and write the model"))
    profiles = subparsers.add_parser("profiles", help="user profiles in DynamoDB")
    actions = profiles.add_subparsers(required=True, metavar="ACTION")
    load = actions.add_parser("load", help="generate the profiles of a bidstream's users")
    load.add_argument("--aws-endpoint", metavar="URL", required=True)
    load.add_argument("--aws-region", default="us-east-1")
    load.add_argument("--table", default=DEFAULT_TABLE)
    load.add_argument(
        "--stream", type=Path, action="append", metavar="FILE", help="default: the sample stream"
    )
    load.set_defaults(command=cmd_profiles_load)


def _train_parser(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group()
    source.add_argument("--impressions", type=int, default=60_000, help="generate this many")
    source.add_argument("--logs", type=Path, metavar="FILE", help="train on this labelled log")
    p.add_argument("--seed", type=int, default=1, help="generator and training seed")
    p.add_argument("--write-logs", type=Path, metavar="FILE", help="also save generated logs")
    p.add_argument("--campaigns", type=Path, default=DEFAULT_CAMPAIGNS, metavar="FILE")
    p.add_argument("--out", type=Path, default=DEFAULT_DIR, metavar="DIR", help="artifact dir")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the metrics as JSON")
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--leaves", type=int, default=15)
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument("--holdout", type=float, default=0.2)
    p.add_argument("--win-samples", type=int, default=100_000, help="auction outcomes to fit")
    p.set_defaults(command=cmd_train)


def _guard(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            status: int = handler(args)
            return status
        except _ERRORS as exc:
            print(f"bidsim: error: {exc}", file=sys.stderr)
            return 2

    run.__doc__ = handler.__doc__
    return run


@_guard
def cmd_train(args: argparse.Namespace) -> int:
    """Train, check against the baseline, write the artifact and (optionally) JSON."""
    config = TrainConfig(
        trees=args.trees,
        num_leaves=args.leaves,
        learning_rate=args.learning_rate,
        holdout=args.holdout,
        seed=args.seed,
    )
    problems = config.problems() + _source_problems(args)
    if problems:
        raise ValueError("; ".join(problems))
    campaigns = load_campaign_file(args.campaigns)
    started = time.perf_counter()
    items = read_log(args.logs, campaigns) if args.logs else _generated(args, campaigns)
    booster, report = fit(dataset(items), config)
    outcomes = win_outcomes(args.win_samples, args.seed)
    win_rate = WinRateModel.fit(outcomes.bids_micros, outcomes.floors_micros, outcomes.won)
    result = {**report.to_dict(), "seconds": round(time.perf_counter() - started, 2)}
    if not (report.auc > report.baseline_auc and report.logloss < report.baseline_logloss):
        _emit(result, args.json)
        print("bidsim: the model does not beat the baseline; artifact not written", file=sys.stderr)
        return 1
    write_artifact(args.out, booster, report, win_rate, {"training": _provenance(args)})
    _emit({**result, "artifact": str(args.out)}, args.json)
    return 0


def _source_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.logs is None and args.impressions < 1_000:
        problems.append(f"--impressions must be at least 1000, got {args.impressions}")
    if args.logs is not None and args.write_logs is not None:
        problems.append("--write-logs only applies to generated impressions")
    if args.win_samples < 1_000:
        problems.append(f"--win-samples must be at least 1000, got {args.win_samples}")
    return problems


def _generated(args: argparse.Namespace, campaigns: Any) -> Iterator[Any]:
    items = impressions(args.impressions, args.seed, campaigns)
    if args.write_logs is None:
        return items
    write_log(args.write_logs, items)
    return read_log(args.write_logs, campaigns)


def _provenance(args: argparse.Namespace) -> dict[str, Any]:
    source = {"logs": str(args.logs)} if args.logs else {"impressions": args.impressions}
    return {
        **source,
        "seed": args.seed,
        "campaigns": _relative(args.campaigns),
        "trees": args.trees,
        "leaves": args.leaves,
        "learning_rate": args.learning_rate,
        "holdout": args.holdout,
        "win_samples": args.win_samples,
        "win_outcomes": "bidder.bidstream.auction Market() over generated floors (models.logs)",
    }


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _emit(result: dict[str, Any], json_out: Path | None) -> None:
    text = orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    print(text.decode())
    if json_out is not None:
        json_out.write_bytes(text + b"\n")


@_guard
def cmd_profiles_load(args: argparse.Namespace) -> int:
    """Generate the profile of every user key in the streams and write them to DynamoDB."""
    streams = args.stream or [SAMPLE_STREAM]
    keys = sorted({key for path in streams for key in stream_user_keys(path)})
    now_ms = SystemClock().wall_ms()
    profiles = [(key, p) for key in keys if (p := synth_profile(key, now_ms)) is not None]
    # The loader's client retries (bidder.adapters.aws); the bid path's fast-fail one would not.
    table = ProfileTable(aws_client("dynamodb", args.aws_endpoint, args.aws_region), args.table)
    table.ensure_table()
    count = table.put_many(profiles)
    print(
        f"loaded {count} profiles into {args.table} at {args.aws_endpoint} "
        f"({len(keys)} user keys in the streams; {len(keys) - count} have no profile)"
    )
    return 0


def stream_user_keys(path: Path) -> Iterator[str]:
    """The user key (``bidder.decide.identity``) of every parseable request in a bidstream."""
    for record in read_stream(path):
        try:
            request = parse_bid_request(record.body)
        except InvalidRequest:
            continue
        key = identify(request, record.ssp).user_key
        if key is not None:
            yield key
