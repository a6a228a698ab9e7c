"""A large stream replays in bounded memory: the peak RSS of the replay's reading, and
of ``bidsim replay`` as a whole, does not grow with the stream.

Each run is its own Python process reporting its own peak (``VmHWM``, as the
importer's test). The reading part is what ``bidsim replay`` does with the file: the
checking pass (``checked_stream``) and every line in send order (``schedule``). The
whole replay sends to a port nothing listens on: every request is read, scheduled,
sent and counted as a failure with no answer, a transport error (or, when a loaded
machine makes the refusal itself late, a timeout), with no bidder answers to hold.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from bidder.bidstream.stream import StreamFile, encode_record, write_stream
from bidder.replay.schedule import Pacing, schedule
from bidder.stack.child import held_port
from tests.bidder.bidstream.importers.test_memory import peak_rss_bytes
from tests.bidder.replay.test_replayer import bid_request

pytestmark = pytest.mark.long(20)

SMALL_LINES, LARGE_LINES = 500, 30_000
PAGE = "https://news.example.com/" + "story-" * 450
"""A request of about 2.9 KB: the large stream is over 80 MB of lines. Few large lines,
not many small ones: each line costs the replay a send, and what is measured is bytes
held."""
DAY0 = 1_767_225_600_000


def _lines(count: int) -> Iterator[bytes]:
    for i in range(count):
        request = {**bid_request(i), "site": {"page": PAGE}}
        yield encode_record(i // 4, DAY0 + 10 * i, "ssp-alpha", request)


def _stream(tmp_path: Path, name: str, count: int) -> tuple[Path, int]:
    """A gzip stream of ``count`` lines; returns it and its uncompressed size."""
    path = tmp_path / f"{name}.jsonl.gz"
    write_stream(path, _lines(count))
    return path, sum(len(line) for line in _lines(count))


@dataclass(frozen=True)
class Streams:
    small: Path
    large: Path
    large_size: int


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> Streams:
    """The small and the large stream, written once for the module's tests."""
    workdir = tmp_path_factory.mktemp("replay-memory")
    small, _ = _stream(workdir, "small", SMALL_LINES)
    large, large_size = _stream(workdir, "large", LARGE_LINES)
    return Streams(small, large, large_size)


READ_THEN_REPORT = """
import sys
from pathlib import Path
from bidder.replay.command import checked_stream
from bidder.replay.schedule import Pacing, schedule
records, fit = checked_stream(Path(sys.argv[1]))
sent = sum(1 for _ in schedule(records, Pacing(speed=1.0)))
status = open("/proc/self/status").read()
print(fit.n, sent)
print(next(line for line in status.splitlines() if line.startswith("VmHWM:")))
"""


def _reading_peak(stream: Path) -> tuple[int, list[str]]:
    """The peak RSS (bytes) of reading ``stream`` as the replay does; and what it counted."""
    done = subprocess.run(
        [sys.executable, "-c", READ_THEN_REPORT, str(stream)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    counts, peak = done.stdout.strip().splitlines()[-2:]
    return int(peak.split()[1]) * 1024, counts.split()


def test_reading_a_large_stream_needs_no_more_memory_than_a_small_one(streams: Streams) -> None:
    large, large_size = streams.large, streams.large_size
    (small_peak, _), (large_peak, counts) = _reading_peak(streams.small), _reading_peak(large)
    assert counts == [str(LARGE_LINES)] * 2
    # Holding the records (or their bodies) would grow by more than the stream's size.
    growth = large_peak - small_peak
    assert growth < large_size / 20, (
        f"peak RSS {small_peak:,} B, then {large_peak:,} B for {large_size:,} B of stream"
    )


def _replay_peak(stream: Path, *options: str) -> int:
    # Held, not just free: a server another test starts during the replay must not take
    # the port and answer some of the requests.
    target = f"http://127.0.0.1:{held_port()}"
    argv = ["replay", str(stream), "--target", target, "--rate", "100000", "--no-throttle"]
    return peak_rss_bytes([*argv, "--no-progress", "--json", f"{stream}.json", *options])


def _report(stream: Path) -> dict:
    report: dict = orjson.loads(Path(f"{stream}.json").read_bytes())
    return report


def test_a_large_stream_replays_in_no_more_memory_than_a_small_one(streams: Streams) -> None:
    large, large_size = streams.large, streams.large_size
    small_peak, large_peak = _replay_peak(streams.small), _replay_peak(large)
    assert large_size > 80_000_000
    # Looser than the reading's bound: the requests in flight (how far the refused
    # connections trail the sends) move the peak by a few MB from run to run.
    growth = large_peak - small_peak
    assert growth < large_size / 4, (
        f"peak RSS {small_peak:,} B, then {large_peak:,} B for {large_size:,} B of stream"
    )
    report = _report(large)
    outcomes = {key: report[key] for key in ("requests", "status", "timeouts", "transport_errors")}
    assert report["requests"] == LARGE_LINES, outcomes
    assert report["transport_errors"] + report["timeouts"] == LARGE_LINES, outcomes
    assert sum(report["status"].values()) == 0, outcomes


def test_a_looped_stream_rereads_the_file_instead_of_holding_it(tmp_path: Path) -> None:
    stream, _ = _stream(tmp_path, "loop", 100)
    pacing = Pacing(rate=1000.0, duration_s=0.25)
    sent = [record.body for _, record in schedule(StreamFile(stream), pacing)]
    assert len(sent) == 250
    assert sent[100:200] == sent[:100] and sent[200:] == sent[:50]
