"""Public value types of the store API (see docs/ENGINE_API.md)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import repeat


@dataclass(frozen=True)
class TopicConfig:
    name: str  # [A-Za-z0-9._-]{1,200}, not "." or ".."
    partitions: int  # 1..1024
    compression: str = "lz4"  # "none" | "lz4"
    retention_hours: float = 168.0


@dataclass(frozen=True)
class MessageIn:
    value: bytes
    key: str | None = None
    tag: str | None = None
    msg_id: str | None = None  # app-iphex-hour-seq; assigned by the node when None
    timestamp: int | None = None  # born time, ms since epoch; store time when None
    partition: int | None = None  # by partition_for_key(key), else round-robin, when None


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: str | None
    tag: str | None
    msg_id: str
    timestamp: int  # born ms
    store_timestamp: int  # ms when the node stored it
    value: bytes


@dataclass(frozen=True, slots=True)
class AppendResult:
    partition: int
    offset: int
    msg_id: str


# slot setters: AppendColumns.results() fills thousands of results without __init__
_SET_PARTITION = AppendResult.partition.__set__  # type: ignore[attr-defined]
_SET_OFFSET = AppendResult.offset.__set__  # type: ignore[attr-defined]
_SET_MSG_ID = AppendResult.msg_id.__set__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class AppendColumns:
    """Where a batch went, as parallel lists (``append_columns``): no object per message."""

    partitions: list[int]
    offsets: list[int]
    msg_ids: list[str]

    def __len__(self) -> int:
        return len(self.msg_ids)

    def results(self) -> list[AppendResult]:
        """One AppendResult per message, built without the frozen-dataclass ``__init__``:
        C-level slot stores, and no dict per message for the garbage collector to track."""
        n = len(self.msg_ids)
        objs = list(map(object.__new__, repeat(AppendResult, n)))
        deque(map(_SET_PARTITION, objs, self.partitions), 0)
        deque(map(_SET_OFFSET, objs, self.offsets), 0)
        deque(map(_SET_MSG_ID, objs, self.msg_ids), 0)
        return objs


@dataclass(frozen=True)
class ReadResult:
    messages: list[Message]
    next_offset: int


@dataclass(frozen=True)
class LookupResult:
    messages: list[Message]  # newest first
    limit_reached: bool


@dataclass(frozen=True)
class FileInfo:
    kind: str  # "segment" | "key_index"
    state: str  # "unsealed" | "sealed" | "compacted" | "uploaded"
    name: str
    size: int
    stored_size: int
    begin_ms: int | None
    end_ms: int | None
