"""The queue indexes of a node, one per (topic, partition), opened on first use.

A queue index maps a partition offset to the log position and size of its record (see
``formats/queue_index.py``); this set opens them under ``queues/<topic>/<partition>`` and
drops entries whose records expired with their segment.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import ItemsView, Iterator, ValuesView

from storage_node.backend.files import fsync_dir
from storage_node.formats.queue_index import QueueIndex


class PartitionQueues:
    def __init__(self, root: str, file_entries: int) -> None:
        self.root = root
        self.file_entries = file_entries
        self._queues: dict[tuple[str, int], QueueIndex] = {}

    def get(self, topic: str, partition: int, next_offset: int | None = None) -> QueueIndex:
        """The queue of ``topic``/``partition``, opened (at ``next_offset`` when given: what
        recovery cuts it back to) on first use."""
        q = self._queues.get((topic, partition))
        if q is None:
            path = os.path.join(self.root, topic, str(partition))
            q = QueueIndex(path, self.file_entries, next_offset)
            self._queues[(topic, partition)] = q
        return q

    def items(self) -> ItemsView[tuple[str, int], QueueIndex]:
        return self._queues.items()

    def values(self) -> ValuesView[QueueIndex]:
        return self._queues.values()

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self._queues)

    def __len__(self) -> int:
        return len(self._queues)

    def next_offsets(self) -> dict[str, dict[str, int]]:
        """``{topic: {partition: next offset}}``: what a checkpoint records."""
        out: dict[str, dict[str, int]] = {}
        for (t, p), q in list(self._queues.items()):
            out.setdefault(t, {})[str(p)] = q.next_offset
        return out

    def drop_expired(self, log_start: int) -> None:
        """Raise every queue's first offset past entries whose records are before
        ``log_start`` (they expired with their segment)."""
        for q in list(self._queues.values()):
            drop_before_position(q, log_start)

    def remove_topic(self, topic: str) -> bool:
        """Close a (deleted) topic's queues and remove its folder; True if there was one."""
        for key in [k for k in self._queues if k[0] == topic]:
            self._queues.pop(key).close()
        path = os.path.join(self.root, topic)
        if not os.path.isdir(path):
            return False
        shutil.rmtree(path)
        fsync_dir(self.root)
        return True

    def has_folder(self, topic: str) -> bool:
        return os.path.isdir(os.path.join(self.root, topic))

    def close(self) -> None:
        for q in self._queues.values():
            q.close()


def drop_before_position(q: QueueIndex, log_start: int) -> None:
    """Raise ``q``'s first offset to its first entry at or after ``log_start`` (binary search:
    entries are in log order)."""
    lo, hi = q.first_offset, q.next_offset
    while lo < hi:
        mid = (lo + hi) // 2
        if q.entries(mid, 1)[0][0] >= log_start:
            hi = mid
        else:
            lo = mid + 1
    q.drop_before(lo)
