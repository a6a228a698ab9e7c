"""Running a package's subcommands as ``bidsim`` would, in the test's process."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def run_commands(add_commands: Callable[[Any], None], argv: list[str]) -> int:
    """Parse ``argv`` with the subcommands ``add_commands`` adds; run the chosen one."""
    parser = argparse.ArgumentParser(prog="bidsim")
    add_commands(parser.add_subparsers(required=True))
    args = parser.parse_args(argv)
    status: int = args.command(args)
    return status
