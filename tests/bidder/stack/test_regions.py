"""LocalRegions: a store per region, and the replicator process between them."""

from __future__ import annotations

import time

import pytest
import redis

from bidder.stack.child import StackError
from bidder.stack.regions import LocalRegions
from fcap import keys
from fcap.replicator_cli import main

WAIT_S = 20.0


def test_a_count_in_one_region_reaches_the_other_through_the_replicator_process() -> None:
    with LocalRegions(("eu", "us"), replicator_args=["--delay-ms", "0"]) as regions:
        eu, us = (redis.Redis.from_url(regions.urls[name]) for name in ("eu", "us"))
        with eu, us:
            # What region_count.lua logs: the counter hash and a slot's new value.
            entry = {"k": keys.counters(keys.USER, "b:u1"), "t": int(time.time() * 1000)}
            eu.xadd(keys.CHANGE_LOG, {**entry, "tok000zzzzz@eu": 2})
            give_up = time.monotonic() + WAIT_S
            while not us.hget(entry["k"], "tok000zzzzz@eu") and time.monotonic() < give_up:
                time.sleep(0.05)
            assert us.hget(entry["k"], "tok000zzzzz@eu") == b"2"
            assert regions.replicator is not None and regions.replicator.running


@pytest.mark.parametrize("names", [("eu",), ("eu", "eu"), ("a", "b", "c", "d")])
def test_a_local_stack_runs_two_or_three_distinct_regions(names: tuple[str, ...]) -> None:
    with pytest.raises(StackError, match="2 to 3 distinct regions"):
        LocalRegions(names)


def test_bad_replicator_options_are_one_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--store", "eu=redis://127.0.0.1:1", "--store", "EU=redis://x"]) == 2
    err = capsys.readouterr().err
    assert "region name 'EU'" in err and "Traceback" not in err
