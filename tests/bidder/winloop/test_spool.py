"""bidder.winloop.spool: framed fsync'd segments, torn tails, delivery marks, orphan adoption."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bidder.winloop.spool import Segment, Spool

NOW_MS = 1_767_225_600_000


def test_appended_records_read_back_in_order(tmp_path: Path) -> None:
    segment = Spool(tmp_path).new_segment(NOW_MS)
    segment.append([b"a", b"bb"])
    segment.append([b"ccc"])
    assert [payload for _, _, payload in segment.records()] == [b"a", b"bb", b"ccc"]


def test_append_returns_each_record_end_offset(tmp_path: Path) -> None:
    segment = Spool(tmp_path).new_segment(NOW_MS)
    ends = segment.append([b"a", b"bb"])
    assert [end for _, end, _ in segment.records()] == ends


def test_reading_from_an_offset_skips_what_is_before(tmp_path: Path) -> None:
    segment = Spool(tmp_path).new_segment(NOW_MS)
    first_end, _ = segment.append([b"a", b"bb"])
    assert [payload for _, _, payload in segment.records(first_end)] == [b"bb"]


def test_a_torn_tail_ends_the_readable_part(tmp_path: Path) -> None:
    segment = Spool(tmp_path).new_segment(NOW_MS)
    segment.append([b"whole"])
    with open(segment.path, "ab") as raw:
        raw.write(b"\x00\x00\x00\x09\x12")  # half a frame header: the writer died mid-write
    orphan = Segment(segment.path, os.open(segment.path, os.O_RDWR))
    assert [payload for _, _, payload in orphan.records()] == [b"whole"]


def test_a_corrupt_record_ends_the_readable_part(tmp_path: Path) -> None:
    segment = Spool(tmp_path).new_segment(NOW_MS)
    segment.append([b"good", b"later"])
    data = bytearray(segment.path.read_bytes())
    data[-1] ^= 0xFF
    segment.path.write_bytes(bytes(data))
    assert [payload for _, _, payload in segment.records()] == [b"good"]


def test_delivery_mark_starts_at_zero_and_keeps_the_last_offset(tmp_path: Path) -> None:
    segment = Spool(tmp_path).new_segment(NOW_MS)
    before = segment.delivered()
    segment.mark_delivered(10)
    segment.mark_delivered(42)
    assert (before, segment.delivered()) == (0, 42)


def test_a_live_writers_segment_is_not_adopted(tmp_path: Path) -> None:
    Spool(tmp_path).new_segment(NOW_MS)
    assert Spool(tmp_path).adopt_orphans(skip=set()) == []


def test_a_dead_writers_segment_is_adopted_with_its_records(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from bidder.winloop.spool import Spool;"
        "Spool(Path(sys.argv[1])).new_segment(1).append([b'left', b'behind'])"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=60)
    [orphan] = Spool(tmp_path).adopt_orphans(skip=set())
    assert [payload for _, _, payload in orphan.records()] == [b"left", b"behind"]


def test_an_adopted_segment_is_not_adopted_twice(tmp_path: Path) -> None:
    segment = Spool(tmp_path).new_segment(NOW_MS)
    segment.close()  # as if its writer had died
    spool = Spool(tmp_path)
    first = spool.adopt_orphans(skip=set())
    assert (len(first), Spool(tmp_path).adopt_orphans(skip=set())) == (1, [])


def test_a_removed_segment_leaves_nothing_behind(tmp_path: Path) -> None:
    segment = Spool(tmp_path).new_segment(NOW_MS)
    segment.append([b"x"])
    segment.mark_delivered(segment.size)
    segment.remove()
    assert list(tmp_path.iterdir()) == []
