"""The ledger spool: an fsync'd on-disk log of entries not yet safely elsewhere.

Theory of operation. Every billed entry is appended here and fsync'd *before* its
notice is acknowledged (write-ahead), whether or not the spend stream is up: an
entry that only lived in memory would be lost to a ``kill -9`` after the exchange
got its 2xx and will never retry. The producer (``bidder.winloop.spend_stream``) then
ships entries from memory and records how far a segment has been delivered.

A spool is a directory of segments ``<ms>-<pid>-<hex>.seg``. A segment is written
by one process only, which holds an exclusive ``flock`` on it for as long as it
lives; the kernel drops the lock when the process dies, however it dies. A segment
whose lock can be taken therefore belongs to a dead writer: an *orphan*, adopted
by whichever process looks next (at start-up and periodically). New segments are
created under a temporary name, locked, then renamed, so no one sees an unlocked
live segment.

Records are framed ``length(4) | crc32(4) | payload``. A torn tail (the process
died mid-write; that write was never fsync'd, so never acknowledged) ends the
readable part. Delivery progress is ``<segment>.ack``: the byte offset up to which
the stream accepted every record, overwritten in place and not fsync'd; losing an
update only re-sends entries, which the reconciler drops by ``ledger_id``.

All methods block (file I/O, fsync): call them off the event loop.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import struct
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

_FRAME = struct.Struct(">II")
_ACK = struct.Struct(">Q")
SUFFIX = ".seg"


class Segment:
    """One locked segment file: appended by its writer or drained by its adopter."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._ack_path = path.with_suffix(".ack")
        self.size = os.fstat(fd).st_size

    @property
    def name(self) -> str:
        return self.path.stem

    def append(self, records: Sequence[bytes]) -> list[int]:
        """Write and fsync ``records``; the end offset of each, in order."""
        frames, ends, offset = [], [], self.size
        for record in records:
            frames.append(_FRAME.pack(len(record), zlib.crc32(record)) + record)
            offset += _FRAME.size + len(record)
            ends.append(offset)
        data = b"".join(frames)
        written = os.pwrite(self._fd, data, self.size)
        if written != len(data):
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        os.fsync(self._fd)
        self.size = offset
        return ends

    def records(self, start: int = 0) -> Iterator[tuple[int, int, bytes]]:
        """``(start, end, payload)`` of each whole record from ``start``; stops at a torn tail."""
        data = os.pread(self._fd, max(self.size - start, 0), start)
        pos = 0
        while pos + _FRAME.size <= len(data):
            length, crc = _FRAME.unpack_from(data, pos)
            end = pos + _FRAME.size + length
            payload = data[pos + _FRAME.size : end]
            if end > len(data) or zlib.crc32(payload) != crc:
                return
            yield start + pos, start + end, payload
            pos = end

    def delivered(self) -> int:
        """Offset up to which every record reached the stream (0 when unknown)."""
        try:
            data = self._ack_path.read_bytes()
        except FileNotFoundError:
            return 0
        return _ACK.unpack(data)[0] if len(data) == _ACK.size else 0

    def mark_delivered(self, offset: int) -> None:
        fd = os.open(self._ack_path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, _ACK.pack(offset), 0)
        finally:
            os.close(fd)

    def remove(self) -> None:
        """Delete the segment (fully delivered and archived); releases the lock last."""
        self.path.unlink(missing_ok=True)
        self._ack_path.unlink(missing_ok=True)
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Spool:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def new_segment(self, now_ms: int) -> Segment:
        """A fresh segment owned (locked) by this process."""
        name = f"{now_ms:013d}-{os.getpid()}-{secrets.token_hex(4)}"
        temp = self.directory / f".{name}.tmp"
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path = self.directory / f"{name}{SUFFIX}"
        os.rename(temp, path)
        _fsync_dir(self.directory)
        return Segment(path, fd)

    def adopt_orphans(self, skip: set[str]) -> list[Segment]:
        """Segments whose writer is dead, now locked by us (oldest first); ``skip`` names ours."""
        adopted = []
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            if path.stem not in skip:
                segment = _try_lock(path)
                if segment is not None:
                    adopted.append(segment)
        return adopted


def _try_lock(path: Path) -> Segment | None:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # The owner may have removed it between our open and our lock: then this fd is
        # an unlinked file whose .ack is gone too, and must not be drained again.
        if os.stat(path).st_ino != os.fstat(fd).st_ino:
            raise FileNotFoundError(path)
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    return Segment(path, fd)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)
