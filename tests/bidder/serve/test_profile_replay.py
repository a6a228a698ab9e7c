"""The profile cache on the running service: a replayed stream, twice, through one bidder.

The profiles of the stream's users are loaded with ``bidsim profiles load``'s handler;
the hit rate is read from the admin port's ``/metrics`` like an operator would
(``scripts/profile_hit_rate.py`` does the same on the whole sample stream).
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import pytest

from bidder.bidstream.generator import generate
from bidder.bidstream.stream import read_stream
from bidder.replay.admin_metrics import samples
from bidder.replay.replayer import ReplayOptions, replay
from bidder.serve.server import running_bidder
from bidder.serve.settings import Settings
from bidder.stack.child import held_port
from models.cli import add_commands

pytestmark = pytest.mark.long(12)


def _load_profiles(endpoint: str, table: str, stream: Path) -> None:
    parser = argparse.ArgumentParser(prog="bidsim")
    add_commands(parser.add_subparsers())
    args = parser.parse_args(
        ["profiles", "load", "--aws-endpoint", endpoint, "--table", table, "--stream", str(stream)]
    )
    assert args.command(args) == 0


async def _lookups(admin_url: str) -> dict[str, float]:
    """{"hit": n, "miss": n} of ``bidsim_profile_lookups_total``, summed over workers."""
    counts = {"hit": 0.0, "miss": 0.0}
    for sample in await samples(admin_url):
        if sample.name == "bidsim_profile_lookups_total":
            counts[sample.labels["result"]] = sample.value
    return counts


@pytest.mark.asyncio
async def test_a_second_replay_through_one_bidder_hits_the_profile_cache_at_least_95_percent(
    bidder_settings: Settings, tmp_path: Path
) -> None:
    stream = tmp_path / "stream.jsonl.gz"
    generate(stream, requests=1_500, seed=5, mean_rate=400.0)
    records = list(read_stream(stream))
    settings = bidder_settings.replace(
        port=held_port(), admin_port=0, profiles_table=f"p-{uuid.uuid4().hex[:12]}"
    )
    assert settings.aws_endpoint is not None
    _load_profiles(settings.aws_endpoint, settings.profiles_table, stream)
    options = ReplayOptions(deadline_ms=settings.deadline_ms)
    async with running_bidder(settings) as bidder:
        target = f"{bidder.bid_url}/openrtb2/bid"
        await replay(records, target, options)  # warm-up: every user is new once
        before = await _lookups(bidder.admin_url)
        await replay(records, target, options)
        after = await _lookups(bidder.admin_url)
    hits, misses = after["hit"] - before["hit"], after["miss"] - before["miss"]
    assert hits + misses >= 100  # enough requests reached stage 5 for the rate to mean much
    assert hits / (hits + misses) >= 0.95
