"""Topic registry persisted in ``topics.json`` (atomic rewrite on every change).

A deleted topic leaves a tombstone: the log position at which it was deleted (its *floor*).
The commit log still holds the old records until retention or compaction removes their
segments, and they carry the topic's name; a record of a topic below its floor belongs to a
deleted incarnation and is never served or re-indexed, so a topic created again under the
same name starts empty, also after a restart or crash recovery. File format 2:
``{"format": 2, "topics": {name: config}, "deleted": {name: floor}}``; the original flat
``{name: config}`` file is still read.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, replace

from storage_node.backend.files import atomic_write
from storage_node.errors import InvalidArgument, TopicConflict, UnknownTopic
from storage_node.formats.limits import MAX_PARTITIONS
from storage_node.formats.names import check_name
from storage_node.store.types import TopicConfig

FORMAT = 2


def adds_partitions(name: str, current: int, wanted: int) -> bool:
    """Whether ``wanted`` partitions add to topic ``name``'s ``current`` count (False when it
    is the same); a lower count is refused, since partitions are never removed."""
    if wanted < current:
        raise InvalidArgument(
            f"topic {name!r} has {current} partitions; partitions can only be "
            f"added, not removed (asked for {wanted})",
            topic=name,
            partitions=current,
        )
    return wanted != current


def validate_topic(cfg: TopicConfig) -> TopicConfig:
    if not isinstance(cfg, TopicConfig):
        raise InvalidArgument("topic config must be a TopicConfig")
    check_name("topic", cfg.name)
    if not isinstance(cfg.partitions, int) or not 1 <= cfg.partitions <= MAX_PARTITIONS:
        raise InvalidArgument(f"partitions must be 1..{MAX_PARTITIONS}, not {cfg.partitions!r}")
    if cfg.compression not in ("none", "lz4"):
        raise InvalidArgument(f"compression must be 'none' or 'lz4', not {cfg.compression!r}")
    if not isinstance(cfg.retention_hours, int | float) or not cfg.retention_hours > 0:
        raise InvalidArgument("retention_hours must be positive")
    return TopicConfig(cfg.name, cfg.partitions, cfg.compression, float(cfg.retention_hours))


class TopicRegistry:
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.topics: dict[str, TopicConfig] = {}
        self.deleted: dict[str, int] = {}  # name -> log position of its deletion (floor)
        if os.path.exists(path):
            with open(path, "rb") as fh:
                data = json.loads(fh.read())
            if data.get("format") == FORMAT:
                configs = data["topics"]
                self.deleted = {str(n): int(pos) for n, pos in data.get("deleted", {}).items()}
            else:  # format 1: the flat name -> config object
                configs = data
            for name, cfg in configs.items():
                self.topics[name] = TopicConfig(name=name, **cfg)

    def _save(self) -> None:
        data = {
            n: {k: v for k, v in asdict(c).items() if k != "name"} for n, c in self.topics.items()
        }
        doc = {"format": FORMAT, "topics": data, "deleted": self.deleted}
        atomic_write(self.path, json.dumps(doc, sort_keys=True).encode())

    def create(self, cfg: TopicConfig) -> bool:
        cfg = validate_topic(cfg)
        with self._lock:
            old = self.topics.get(cfg.name)
            if old is not None:
                if old == cfg:
                    return False
                raise TopicConflict(
                    f"topic {cfg.name!r} exists with a different configuration", topic=cfg.name
                )
            self.topics[cfg.name] = cfg
            self._save()
            return True

    def delete(self, name: str, floor: int) -> TopicConfig:
        """Remove a topic and record its floor, in one atomic rewrite; its config."""
        with self._lock:
            cfg = self.get(name)
            del self.topics[name]
            self.deleted[name] = max(int(floor), self.deleted.get(name, 0))
            self._save()
            return cfg

    def grow(self, name: str, partitions: object) -> TopicConfig:
        """Raise a topic's partition count (never lower it); the new config."""
        with self._lock:
            cfg = self.get(name)
            if (
                isinstance(partitions, bool)
                or not isinstance(partitions, int)
                or not 1 <= partitions <= MAX_PARTITIONS
            ):
                raise InvalidArgument(
                    f"partitions must be an integer from 1 to {MAX_PARTITIONS}, not {partitions!r}"
                )
            if not adds_partitions(name, cfg.partitions, partitions):
                return cfg
            new = replace(cfg, partitions=partitions)
            self.topics[name] = new
            self._save()
            return new

    def forget_tombstones(self, below: int) -> list[str]:
        """Drop the tombstones whose records are all gone (log start past their floor)."""
        with self._lock:
            gone = [n for n, floor in self.deleted.items() if floor <= below]
            if gone:
                for name in gone:
                    del self.deleted[name]
                self._save()
            return gone

    def floor(self, name: str) -> int:
        """Records of ``name`` below this log position belong to a deleted incarnation."""
        return self.deleted.get(name, 0)

    def visible(self, topic: str, pos: int) -> bool:
        """Whether a record of ``topic`` at log position ``pos`` belongs to a live topic."""
        return topic in self.topics and pos >= self.deleted.get(topic, 0)

    def get(self, name: str) -> TopicConfig:
        cfg = self.topics.get(name) if isinstance(name, str) else None
        if cfg is None:
            raise UnknownTopic(f"unknown topic {name!r}", topic=str(name))
        return cfg

    def all(self) -> list[TopicConfig]:
        return sorted(self.topics.values(), key=lambda c: c.name)
