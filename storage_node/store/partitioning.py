"""Partition choice shared by the store and the client (documented, so both agree)."""

from __future__ import annotations

import zlib


def partition_for_key(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions
