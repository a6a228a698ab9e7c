"""``bidsim identity build``: an identity graph file from the generator's ground truth
(``bidder.bidstream.identity_truth``) or from a file of people, one JSON array of user
keys per line."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson

from bidder.bidstream.identity_truth import truth_graph
from bidder.decide.identity_graph import IdentityGraph, build_graph


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
