"""Topic registry persisted in ``topics.json`` (atomic rewrite on every change)."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict

from storage_node.backend.files import atomic_write
from storage_node.errors import InvalidArgument, TopicConflict, UnknownTopic
from storage_node.formats.names import check_name
from storage_node.store.types import TopicConfig


def validate_topic(cfg: TopicConfig) -> TopicConfig:
    if not isinstance(cfg, TopicConfig):
        raise InvalidArgument("topic config must be a TopicConfig")
    check_name("topic", cfg.name)
    if not isinstance(cfg.partitions, int) or not 1 <= cfg.partitions <= 1024:
        raise InvalidArgument(f"partitions must be 1..1024, not {cfg.partitions!r}")
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
        if os.path.exists(path):
            with open(path, "rb") as fh:
                for name, cfg in json.loads(fh.read()).items():
                    self.topics[name] = TopicConfig(name=name, **cfg)

    def _save(self) -> None:
        data = {
            n: {k: v for k, v in asdict(c).items() if k != "name"} for n, c in self.topics.items()
        }
        atomic_write(self.path, json.dumps(data, sort_keys=True).encode())

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

    def get(self, name: str) -> TopicConfig:
        cfg = self.topics.get(name) if isinstance(name, str) else None
        if cfg is None:
            raise UnknownTopic(f"unknown topic {name!r}", topic=str(name))
        return cfg

    def all(self) -> list[TopicConfig]:
        return sorted(self.topics.values(), key=lambda c: c.name)
