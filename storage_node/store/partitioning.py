"""Partition choice shared by the store, the client and the Spark writer (documented, so all
agree): a keyed message goes to ``key_hash(key) % partitions`` (see formats/keyhash.py)."""

from __future__ import annotations

import numpy as np

from storage_node.formats.keyhash import key_hash, key_hashes


def partition_for_key(key: str, partitions: int) -> int:
    return key_hash(key) % partitions


def partitions_for_keys(blob: bytes | memoryview, lens: np.ndarray, partitions: int) -> np.ndarray:
    """The partition of every key packed in ``blob`` (-1 where ``lens`` says no key)."""
    out = (key_hashes(blob, lens) % partitions).astype(np.int64)
    out[np.asarray(lens) < 0] = -1
    return out
