"""``python -m bidder``: the ``bidsim`` command, for child processes started by path."""

from bidder.cli import main

raise SystemExit(main())
