"""Commit-log segment naming and scanning.

Segments are named by their first log position as 20 decimal digits (seed 004), so the file
holding position p is the last one whose name is <= p. Positions are 64-bit and continuous
across segments (a frame never straddles two files).
"""

from __future__ import annotations

import os

from storage_node.formats.record import FLAG_BATCH_END, FRAME_SIZE, check_frame, frame_flags

NAME_DIGITS = 20


def segment_name(start: int) -> str:
    return f"{start:0{NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    return int(name) if len(name) == NAME_DIGITS and name.isdigit() else None


def list_segments(directory: str) -> list[int]:
    if not os.path.isdir(directory):
        return []
    return sorted(
        s for s in (parse_segment_name(n) for n in os.listdir(directory)) if s is not None
    )


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


def scan_segment(data: bytes, start: int = 0) -> tuple[int, list[int]]:
    """Walk frames from ``start``; returns (end of the valid run, offsets of bad frames kept).

    Mid-file corruption is recorded and skipped (``frame_step``); the first bad frame that is
    not is a torn tail: the run ends there.
    """
    off = start
    corrupt: list[int] = []
    while off < len(data):
        size, damaged = frame_step(data, off)
        if not size:
            break
        if damaged:
            corrupt.append(off)
        off += size
    return off, corrupt


def last_batch_end(data: bytes, start: int, end: int) -> int:
    """End of the last whole batch among the frames in ``[start, end)``, or ``start``.

    ``start`` must be a batch boundary (a checkpoint position or a segment start).
    """
    off = start
    last = start
    while off + FRAME_SIZE <= end:
        size = int.from_bytes(data[off : off + 4], "little")
        if size < FRAME_SIZE or off + size > end:
            break
        if frame_flags(data, off) & FLAG_BATCH_END:
            last = off + size
        off += size
    return last
