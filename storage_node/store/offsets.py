"""Committed consumer offsets per (group, topic, partition), one JSON file per group."""

from __future__ import annotations

import json
import os
import threading

from storage_node.backend.files import atomic_write, ensure_dir


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
