"""Partition choice shared by the store, the node's HTTP API, the client and the Spark writer
(documented, so all agree): a keyed message goes to ``key_hash(key) % partitions`` (see
formats/keyhash.py); a message with neither key nor partition goes round robin."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from storage_node.formats.keyhash import key_hash, key_hashes


def partition_for_key(key: str, partitions: int) -> int:
    return key_hash(key) % partitions


def partitions_for_keys(blob: bytes | memoryview, lens: np.ndarray, partitions: int) -> np.ndarray:
    """The partition of every key packed in ``blob`` (-1 where ``lens`` says no key)."""
    out = (key_hashes(blob, lens) % partitions).astype(np.int64)
    out[np.asarray(lens) < 0] = -1
    return out


class RoundRobin:
    """Per-topic round robin over the partitions a message without key may go to.

    One counter per topic; the caller serialises calls (the store under its lock, the
    node on its event loop).
    """

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def next(self, topic: str, choices: Sequence[int]) -> int:
        """The next partition of ``topic`` among ``choices`` (not empty)."""
        index = self._next.get(topic, 0)
        self._next[topic] = index + 1
        return choices[index % len(choices)]

    def run(self, topic: str, choices: Sequence[int], count: int) -> np.ndarray:
        """The next ``count`` partitions of ``topic`` among ``choices``, as int64."""
        index = self._next.get(topic, 0)
        self._next[topic] = index + count
        return np.asarray(choices, dtype=np.int64)[(index + np.arange(count)) % len(choices)]
