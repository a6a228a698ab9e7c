"""``bidsim`` and ``python -m bidder``: the entry point, light on purpose.

A bid worker process first imports its parent's main module (``multiprocessing``
does so) when that is a script, as the ``bidsim`` console script is. The command
line is therefore imported only when the command runs: imported here, every command's
modules (the replay, the pacing tools, the model tools) would load in each worker.
"""

import sys


def main() -> int:
    from bidder.cli import main as run_command

    return run_command()


if __name__ == "__main__":
    sys.exit(main())
