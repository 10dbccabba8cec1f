"""Committed consumer offsets per (group, topic, partition), one JSON file per group.

A replicated log also writes each commit into the log as a record of ``OFFSETS_TOPIC``
(``commit_frames``): copies apply it as they index the bytes (``commits_in``), recovery
applies it again on replay, so a failover's new leader holds every acknowledged commit.
A deletion of a group's offsets travels the same way, as a commit of offset ``DELETED``
whose topic and partition may be null (every topic, every partition of the topic).
"""

from __future__ import annotations

import json
import os
import threading

import numpy as np

from storage_node.backend.files import atomic_write, ensure_dir, fsync_dir, remove_file
from storage_node.formats.filenames import JSON_SUFFIX, group_file_name
from storage_node.formats.packed import PackedColumn
from storage_node.formats.record import EncodedBatch, decode_frame, encode_frames

# No topic can be named so (``~`` breaks the name rule): its records are never indexed,
# listed or read as messages.
OFFSETS_TOPIC = "~offsets"
DELETED = -1  # the offset of a logged deletion


def commit_frames(
    group: str, topic: str | None, partition: int | None, offset: int, now_ms: int
) -> EncodedBatch:
    """One offset commit as a one-record batch of ``OFFSETS_TOPIC`` for the log."""
    value = json.dumps([group, topic, partition, offset]).encode()
    none = PackedColumn.of_bytes([None])
    zero = np.zeros(1, dtype=np.int64)
    return encode_frames(
        OFFSETS_TOPIC.encode(), zero, zero, now_ms, now_ms, none, none,
        PackedColumn.of_bytes([b""]), PackedColumn.of_bytes([value]),
    )  # fmt: skip


def commits_in(frame: bytes | memoryview) -> list[tuple[str, str | None, int | None, int]]:
    """The (group, topic, partition, offset) commits of one ``OFFSETS_TOPIC`` frame
    (offset DELETED: a deletion, topic and partition None for all)."""
    commits = []
    for _row, record in decode_frame(frame):
        group, topic, partition, offset = json.loads(record.value)
        commits.append(
            (
                str(group),
                None if topic is None else str(topic),
                None if partition is None else int(partition),
                int(offset),
            )
        )
    return commits


class OffsetStore:
    def __init__(self, root: str) -> None:
        self.root = ensure_dir(root)
        self._lock = threading.Lock()
        self.groups: dict[str, dict[str, dict[int, int]]] = {}
        for name in os.listdir(self.root):
            if name.endswith(JSON_SUFFIX):
                with open(os.path.join(self.root, name), "rb") as fh:
                    data = json.loads(fh.read())
                self.groups[name[: -len(JSON_SUFFIX)]] = {
                    t: {int(p): int(o) for p, o in ps.items()} for t, ps in data.items()
                }

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            g = self.groups.setdefault(group, {})
            g.setdefault(topic, {})[partition] = offset
            data = {t: {str(p): o for p, o in ps.items()} for t, ps in g.items()}
            atomic_write(
                os.path.join(self.root, group_file_name(group)),
                json.dumps(data, sort_keys=True).encode(),
            )

    def delete(self, group: str, topic: str | None = None, partition: int | None = None) -> bool:
        """Forget a group's offsets: all of them, a topic's, or one partition's; whether any
        was there (a group left with none is removed, as ``drop_topic`` does)."""
        with self._lock:
            g = self.groups.get(group)
            if g is None:
                return False
            if topic is None:
                found = bool(g)
                g.clear()
            elif partition is None:
                found = g.pop(topic, None) is not None
            else:
                found = g.get(topic, {}).pop(partition, None) is not None
                if topic in g and not g[topic]:
                    del g[topic]
            path = os.path.join(self.root, group_file_name(group))
            if g:
                data = {t: {str(p): o for p, o in ps.items()} for t, ps in g.items()}
                atomic_write(path, json.dumps(data, sort_keys=True).encode())
            else:
                del self.groups[group]
                remove_file(path)
                fsync_dir(self.root)
            return found

    def get_groups(self) -> list[str]:
        with self._lock:
            return list(self.groups)

    def get(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        with self._lock:
            g = self.groups.get(group, {})
            return {t: dict(ps) for t, ps in g.items() if topic is None or t == topic}

    def has_topic(self, topic: str) -> bool:
        with self._lock:
            return any(topic in g for g in self.groups.values())

    def drop_topic(self, topic: str) -> list[str]:
        """Forget every group's offsets of a deleted topic; returns the groups touched (a
        group left with no offsets is removed)."""
        touched = []
        with self._lock:
            for group, g in list(self.groups.items()):
                if g.pop(topic, None) is None:
                    continue
                touched.append(group)
                path = os.path.join(self.root, group_file_name(group))
                if g:
                    data = {t: {str(p): o for p, o in ps.items()} for t, ps in g.items()}
                    atomic_write(path, json.dumps(data, sort_keys=True).encode())
                else:
                    del self.groups[group]
                    remove_file(path)
            if touched:
                fsync_dir(self.root)
        return touched
