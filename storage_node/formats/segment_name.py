"""Commit-log segment file names.

Segments are named by their first log position as 20 decimal digits (seed 004), so the file
holding position p is the last one whose name is <= p. Positions are 64-bit and continuous
across segments (a frame never straddles two files). Walking the frames inside a segment is
the record format's job (``formats/record.py``).
"""

from __future__ import annotations

NAME_DIGITS = 20


def segment_name(start: int) -> str:
    return f"{start:0{NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    return int(name) if len(name) == NAME_DIGITS and name.isdigit() else None
