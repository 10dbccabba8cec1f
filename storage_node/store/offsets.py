"""Committed consumer offsets per (group, topic, partition), one JSON file per group."""

from __future__ import annotations

import json
import os
import threading

from storage_node.backend.files import atomic_write, ensure_dir, fsync_dir, remove_file


class OffsetStore:
    def __init__(self, root: str) -> None:
        self.root = ensure_dir(root)
        self._lock = threading.Lock()
        self.groups: dict[str, dict[str, dict[int, int]]] = {}
        for name in os.listdir(self.root):
            if name.endswith(".json"):
                with open(os.path.join(self.root, name), "rb") as fh:
                    data = json.loads(fh.read())
                self.groups[name[:-5]] = {
                    t: {int(p): int(o) for p, o in ps.items()} for t, ps in data.items()
                }

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            g = self.groups.setdefault(group, {})
            g.setdefault(topic, {})[partition] = offset
            data = {t: {str(p): o for p, o in ps.items()} for t, ps in g.items()}
            atomic_write(
                os.path.join(self.root, group + ".json"), json.dumps(data, sort_keys=True).encode()
            )

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
                path = os.path.join(self.root, group + ".json")
                if g:
                    data = {t: {str(p): o for p, o in ps.items()} for t, ps in g.items()}
                    atomic_write(path, json.dumps(data, sort_keys=True).encode())
                else:
                    del self.groups[group]
                    remove_file(path)
            if touched:
                fsync_dir(self.root)
        return touched
