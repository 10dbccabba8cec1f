"""Checking and walking a run of commit-log frames: the one walker.

Recovery's tail scan and replay, the indexing of frames copied from a leader and log
shipping all step through log bytes frame by frame with these functions, so they agree on
what a torn tail is (a frame that is short or fails its checks, with nothing valid after
it: the walk ends there) and what mid-file corruption is (a bad frame whose claimed length
leads to a valid frame: stepped over, never served). A run of frames ends a batch when its
last frame carries ``FLAG_BATCH_END``; recovery and copies keep whole batches only. The
frame layout itself is ``record.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from storage_node.errors import CorruptData
from storage_node.formats.record import (
    FLAG_BATCH_END,
    FLAG_PRODUCER,
    FRAME,
    FRAME_SIZE,
    ROW,
    ROW_DTYPE,
    check_frame,
    frame_flags,
    frame_length,
)


def check_frames(data: bytes | memoryview) -> int:
    """The number of frames in ``data``; CorruptData unless every frame is whole and passes
    its CRC and the last one ends a batch (bytes copied from another log)."""
    off = 0
    frames = 0
    last_flags = FLAG_BATCH_END
    while off < len(data):
        size = check_frame(data, off, len(data) - off)
        if size <= 0:
            raise CorruptData(f"a copied frame at byte {off} is torn or fails its CRC")
        last_flags = frame_flags(data, off)
        off += size
        frames += 1
    if not last_flags & FLAG_BATCH_END:
        raise CorruptData("copied frames end inside a batch")
    return frames


def iter_frames(
    buf: bytes | memoryview, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int]]:
    """Yield ``(offset, size)`` of consecutive valid frames; stops at the first bad one."""
    end = len(buf) if end is None else end
    off = start
    while off < end:
        size = check_frame(buf, off, end - off)
        if size < 0:
            return
        yield off, size
        off += size


def frame_step(data: bytes | memoryview, off: int) -> tuple[int, bool]:
    """What starts at ``off``: ``(size, False)`` for a valid frame; ``(size, True)`` for a bad
    frame whose length is plausible and is followed by a valid frame (mid-file corruption,
    to be skipped, never served); ``(0, True)`` for anything else (a torn tail)."""
    n = len(data)
    size = check_frame(data, off, n - off)
    if size > 0:
        return size, False
    if n - off >= 8:
        claimed = int.from_bytes(data[off : off + 4], "little")
        nxt = off + claimed
        if claimed >= FRAME_SIZE and nxt < n and check_frame(data, nxt, n - nxt) > 0:
            return claimed, True
    return 0, True


def walk_frames(data: bytes | memoryview, start: int = 0) -> Iterator[tuple[int, int, bool]]:
    """Yield ``(offset, size, damaged)`` for each frame from ``start`` (``frame_step``):
    a damaged frame with a valid one after it is yielded and stepped over; the walk ends at
    the end of ``data`` or at a torn tail (yielded as ``(offset, 0, True)``)."""
    off = start
    while off < len(data):
        size, damaged = frame_step(data, off)
        yield off, size, damaged
        if not size:
            return
        off += size


def scan_frames(data: bytes | memoryview, start: int = 0) -> tuple[int, list[int]]:
    """Walk frames from ``start``; returns (end of the valid run, offsets of bad frames kept).

    Mid-file corruption is recorded and skipped (``frame_step``); the first bad frame that is
    not is a torn tail: the run ends there.
    """
    end = start
    corrupt: list[int] = []
    for off, size, damaged in walk_frames(data, start):
        if not size:
            break
        if damaged:
            corrupt.append(off)
        end = off + size
    return end, corrupt


def last_batch_end(data: bytes | memoryview, start: int, end: int, first: bool = False) -> int:
    """End of the last (``first``: the first) whole batch among the frames in
    ``[start, end)``, or ``start``.

    ``start`` must be a batch boundary (a checkpoint position or a segment start).
    """
    off = start
    last = start
    while off + FRAME_SIZE <= end:
        size = frame_length(data, off)
        if size < FRAME_SIZE or off + size > end:
            break
        if frame_flags(data, off) & FLAG_BATCH_END:
            last = off + size
            if first:
                break
        off += size
    return last


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """The batch-level fields of a frame (what replay groups consecutive frames by)."""

    flags: int
    count: int
    store_ms: int
    sequence: int
    topic: bytes
    producer: bytes

    @classmethod
    def of(cls, frame: bytes | memoryview) -> FrameHeader:
        _size, _crc, _m, flags, count, tlen, plen, _r, store_ms, sequence = FRAME.unpack_from(frame)
        lead = FRAME_SIZE + ROW * count
        return cls(
            flags,
            count,
            store_ms,
            sequence,
            bytes(frame[lead : lead + tlen]),
            bytes(frame[lead + tlen : lead + tlen + plen]),
        )

    def batch_key(self) -> tuple[int, int, int, bytes, bytes]:
        """What the frames of one appended batch share."""
        return (self.flags & FLAG_PRODUCER, self.store_ms, self.sequence, self.topic, self.producer)

    def rows(self, frame: bytes | memoryview) -> np.ndarray:
        """The frame's rows as a structured array (a view of ``frame``)."""
        return np.frombuffer(frame, dtype=ROW_DTYPE, count=self.count, offset=FRAME_SIZE)
