"""Public value types of the store API (see docs/ENGINE_API.md)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np


@dataclass(frozen=True)
class TopicConfig:
    name: str  # [A-Za-z0-9._-]{1,200}, not "." or ".."
    partitions: int  # 1..MAX_PARTITIONS (formats/limits.py)
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
    headers: Sequence[tuple[str, bytes | None]] = ()  # in order; names may repeat


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
    headers: tuple[tuple[str, bytes | None], ...] = ()  # byte for byte as produced


@dataclass(frozen=True, slots=True)
class AppendResult:
    partition: int
    offset: int
    msg_id: str


# slot setters: AppendColumns.results() fills thousands of results without __init__ (the
# slot descriptors, read from the class's namespace)
_SET_PARTITION = vars(AppendResult)["partition"].__set__
_SET_OFFSET = vars(AppendResult)["offset"].__set__
_SET_MSG_ID = vars(AppendResult)["msg_id"].__set__


class AppendColumns:
    """Where a batch went, as arrays (``append_columns``): no object per message.

    ``partitions``, ``offsets`` and ``msg_ids`` are lists built on first use; the arrays
    and the packed IDs serve callers that answer in bulk (the binary wire answer).
    """

    __slots__ = ("partition_array", "offset_array", "ids_blob", "id_lens", "_msg_ids")

    def __init__(
        self,
        partitions: Sequence[int] | np.ndarray,
        offsets: Sequence[int] | np.ndarray,
        ids_blob: bytes | bytearray | memoryview | Sequence[str] = b"",
        id_lens: np.ndarray | None = None,
    ) -> None:
        """IDs packed (``ids_blob`` with ``id_lens``) or as a list of strings."""
        self.partition_array = np.asarray(partitions, dtype=np.int64)
        self.offset_array = np.asarray(offsets, dtype=np.int64)
        self._msg_ids: list[str] | None = None
        if isinstance(ids_blob, bytes | bytearray | memoryview):
            if id_lens is None:
                if len(ids_blob):
                    raise ValueError("packed message IDs need their lengths (id_lens)")
                id_lens = np.zeros(0, dtype=np.int64)
            self.ids_blob = bytes(ids_blob)
        else:  # given as a list of strings
            self._msg_ids = list(ids_blob)
            encoded = [m.encode() for m in self._msg_ids]
            self.ids_blob = b"".join(encoded)
            id_lens = np.fromiter(map(len, encoded), np.int64, len(encoded))
        self.id_lens = np.asarray(id_lens, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.offset_array)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AppendColumns) and (
            self.partitions == other.partitions
            and self.offsets == other.offsets
            and self.msg_ids == other.msg_ids
        )

    def __repr__(self) -> str:
        return f"AppendColumns({len(self)} messages)"

    @property
    def partitions(self) -> list[int]:
        return self.partition_array.tolist()

    @property
    def offsets(self) -> list[int]:
        return self.offset_array.tolist()

    @property
    def msg_ids(self) -> list[str]:
        if self._msg_ids is None:
            ends = np.cumsum(self.id_lens).tolist()
            text = self.ids_blob.decode()
            if len(text) == len(self.ids_blob):  # ASCII: byte offsets are character offsets
                self._msg_ids = list(map(text.__getitem__, map(slice, [0, *ends[:-1]], ends)))
            else:
                blob = self.ids_blob
                self._msg_ids = [
                    blob[a:b].decode() for a, b in zip([0, *ends[:-1]], ends, strict=True)
                ]
        return self._msg_ids

    def results(self) -> list[AppendResult]:
        """One AppendResult per message, built without the frozen-dataclass ``__init__``:
        C-level slot stores, and no dict per message for the garbage collector to track."""
        n = len(self)
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
class LogEnds:
    """Positions of a store's commit log: its first byte, the end of what was appended,
    of what is in files (may be shipped to followers) and of what is fsynced."""

    start: int
    end: int
    shippable_end: int
    durable_end: int
    sync_mode: bool  # flush_mode "sync": an append is answered once durable
    failed: bool  # a write failed; the store recovers in place before the next


@dataclass(frozen=True)
class FileInfo:
    kind: str  # "segment" | "key_index"
    state: str  # a formats.filenames.State: unsealed, sealed, compacted, uploaded
    name: str
    size: int
    stored_size: int
    begin_ms: int | None
    end_ms: int | None
