"""Checkpoint: how far every derived index is known complete, plus the clean-shutdown flag.

Recovery after a crash replays the commit log from ``log_end`` only; after a clean shutdown
(``clean`` true) it replays nothing. Stored as JSON through an atomic write.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from storage_node.backend.files import atomic_write
from storage_node.errors import CorruptData

VERSION = 1


@dataclass
class Checkpoint:
    log_end: int = 0  # every record below this position is indexed
    clean: bool = False  # written by a clean close, cleared on open
    key_index_name: str | None = None  # active key-index file and its item count
    key_index_count: int = 1
    queues: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> partition -> next
    last_store_ms: int = 0
    version: int = VERSION

    def save(self, path: str) -> None:
        atomic_write(path, json.dumps(asdict(self), sort_keys=True).encode())

    @classmethod
    def load(cls, path: str) -> Checkpoint | None:
        if not os.path.exists(path):
            return None
        try:
            with open(path, "rb") as fh:
                data = json.loads(fh.read())
            return cls(**data)
        except (ValueError, TypeError) as exc:
            raise CorruptData(f"checkpoint unreadable: {exc}") from exc
