"""Store configuration; every field has a default.

A node reads these fields from its config file, MSGSTORE_* environment variables and flags
in one place, ``storage_node/server/settings.py`` (pydantic-settings); the store itself reads
no environment. Names and defaults: docs/CONFIG.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_node.errors import InvalidArgument

GIB = 1 << 30
MIB = 1 << 20


@dataclass
class StoreConfig:
    data_dir: str = "data"
    segment_bytes: int = GIB
    flush_mode: str = "sync"  # "sync": ack after fsync (group commit); "async": ack from memory
    flush_max_messages: int = 100_000  # async: flush when the cache holds this many messages
    flush_max_bytes: int = 4 * MIB  # ... or this many bytes
    flush_max_age_ms: int = 200  # ... or its oldest message is this old
    async_fsync_interval_ms: int = 1000  # async: written at every flush, fsynced this often
    async_fsync_bytes: int = 8 * MIB  # ... and whenever this much was written since the last
    index_slots: int = 5_000_000
    index_items: int = 20_000_000
    queue_file_entries: int = 300_000
    max_message_bytes: int = 4 * MIB
    node_ip: str = "127.0.0.1"
    object_store_url: str | None = None  # None: <data_dir>/objects directory backend
    compact_after_s: float = 60.0  # sealed files older than this get compacted
    upload_after_s: float = 3600.0  # compacted files older than this get uploaded
    lifecycle_interval_s: float = 30.0  # 0 disables the background worker
    default_retention_hours: float = 168.0
    checkpoint_interval_s: float = 10.0

    def validate(self) -> StoreConfig:
        if self.flush_mode not in ("sync", "async"):
            raise InvalidArgument(f"flush_mode must be 'sync' or 'async', not {self.flush_mode!r}")
        for name in (
            "segment_bytes",
            "flush_max_messages",
            "flush_max_bytes",
            "async_fsync_bytes",
            "index_slots",
            "index_items",
            "queue_file_entries",
            "max_message_bytes",
        ):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"{name} must be positive")
        if self.index_items < 2:
            raise InvalidArgument("index_items must be at least 2")
        if self.index_slots >= 2**32 or self.index_items >= 2**32:
            raise InvalidArgument("index_slots and index_items must fit in 32 bits")
        return self
