"""``bidsim identity build``: an identity graph file from the generator's ground truth
(``bidder.bidstream.identity_truth``) or from a file of people, one JSON array of user
keys per line. ``bidsim identity load``: a graph file into the DynamoDB table the bidder
reads with ``--identity-table`` (``bidder.decide.identity_table``), as a new version."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson

from bidder.adapters.aws import aws_client
from bidder.bidstream.identity_truth import truth_graph
from bidder.decide.identity_graph import IdentityGraph, build_graph, load_graph
from bidder.decide.identity_table import IdentityTable


def add_commands(subparsers: Any) -> None:
    identity = subparsers.add_parser("identity", help="identity graphs: ids -> people")
    sub = identity.add_subparsers(required=True, metavar="COMMAND")
    build = sub.add_parser("build", help="write an identity graph file")
    source = build.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--people", type=int, metavar="N",
        help="the generator's N most active people, every id of each (ground truth)",
    )  # fmt: skip
    source.add_argument(
        "--from", dest="from_file", type=Path, metavar="FILE",
        help="one JSON array of user keys per line, one line per person",
    )  # fmt: skip
    build.add_argument("--version", type=int, default=1, help="the graph's version (>= 1)")
    build.add_argument("--out", type=Path, required=True)
    build.set_defaults(command=cmd_build)
    load = sub.add_parser("load", help="write a graph file to a DynamoDB table as a new version")
    load.add_argument("--graph", type=Path, required=True, metavar="FILE")
    load.add_argument("--table", required=True, metavar="NAME")
    load.add_argument("--aws-endpoint", required=True, metavar="URL")
    load.add_argument("--aws-region", default="us-east-1", metavar="REGION")
    load.set_defaults(command=cmd_load)


def cmd_build(args: argparse.Namespace) -> int:
    if args.version < 1:
        raise ValueError("--version must be at least 1")
    if args.people is not None:
        if args.people < 1:
            raise ValueError("--people must be at least 1")
        graph = truth_graph(args.people, args.version)
    else:
        graph = build_graph(args.version, people_from_file(args.from_file))
    args.out.write_bytes(orjson.dumps(graph.to_doc()))
    clusters = len({cluster for cluster, _ in graph.ids.values()})
    print(f"wrote graph version {graph.version} to {args.out}: {_counts(graph, clusters)}")
    return 0


def cmd_load(args: argparse.Namespace) -> int:
    graph = load_graph(args.graph)  # GraphFormatError (a ValueError) names the file
    table = IdentityTable(aws_client("dynamodb", args.aws_endpoint, args.aws_region), args.table)
    table.ensure_table()
    previous = table.current_version()
    table.load(graph)
    clusters = len({cluster for cluster, _ in graph.ids.values()})
    was = "" if previous is None else f" (was version {previous})"
    print(
        f"loaded graph version {graph.version} into table {args.table} at {args.aws_endpoint}"
        f"{was}: {_counts(graph, clusters)}"
    )
    return 0


def people_from_file(path: Path) -> list[list[str]]:
    """The people of a file; ValueError names the file and line of a bad one."""
    people: list[list[str]] = []
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                keys = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise ValueError(f"{path}: line {number}: not valid JSON") from None
            if (
                not isinstance(keys, list)
                or not keys
                or not all(isinstance(k, str) and k for k in keys)
            ):
                raise ValueError(f"{path}: line {number}: must be a non-empty array of user keys")
            people.append(keys)
    return people


def _counts(graph: IdentityGraph, clusters: int) -> str:
    return f"{len(graph.ids):,} ids in {clusters:,} people"
