"""The answer of a columnar read: messages of one partition as packed columns.

``Store.read_columns`` and ``Reads.fetch_columns`` return it (columnar.py builds it from
the log); the binary read answer encodes its columns as they are, and ``messages()`` turns
it into the engine's ``Message`` objects for JSON answers and record-shaped callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat

import numpy as np

from storage_node.formats.headers import Headers, headers_list
from storage_node.formats.packed import PackedColumn, concat_columns
from storage_node.store.types import Message


@dataclass
class ReadBatch:
    """Messages of one partition as columns, in offset order.

    ``offsets``, ``timestamps`` (born ms) and ``store_timestamps`` are int64 arrays; the
    four byte columns are PackedColumns (``lens`` int64, -1 = absent key or tag; message
    IDs and values are always present). ``next_offset`` is where the next read continues.
    ``headers`` holds each message's headers (``formats/headers.py``'s byte string, 0 bytes
    for none); None when no message of the batch has any.
    """

    topic: str
    partition: int
    offsets: np.ndarray
    timestamps: np.ndarray
    store_timestamps: np.ndarray
    keys: PackedColumn
    tags: PackedColumn
    msg_ids: PackedColumn
    values: PackedColumn
    next_offset: int
    headers: PackedColumn | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    @classmethod
    def empty(cls, topic: str, partition: int, next_offset: int) -> ReadBatch:
        none = np.zeros(0, dtype=np.int64)
        col = PackedColumn(b"", none)
        return cls(topic, partition, none, none, none, col, col, col, col, next_offset)

    @property
    def value_bytes(self) -> int:
        return len(self.values.blob)

    def head(self, k: int) -> ReadBatch:
        """The first ``k`` messages."""
        if k >= len(self):
            return self
        return ReadBatch(
            self.topic,
            self.partition,
            self.offsets[:k],
            self.timestamps[:k],
            self.store_timestamps[:k],
            _head(self.keys, k),
            _head(self.tags, k),
            _head(self.msg_ids, k),
            _head(self.values, k),
            self.next_offset,
            None if self.headers is None else _head(self.headers, k),
        )

    def header_lists(self) -> list[Headers]:
        """Every message's headers (``()`` for none)."""
        if self.headers is None:
            return [()] * len(self)
        return headers_list(self.headers.blob, self.headers.lens)

    def messages(self) -> list[Message]:
        """The engine's ``Message`` objects (for JSON answers and record-shaped callers)."""
        n = len(self)
        if not n:
            return []
        return list(
            map(
                Message,
                repeat(self.topic, n),
                repeat(self.partition, n),
                self.offsets.tolist(),
                _texts(self.keys),
                _texts(self.tags),
                _texts(self.msg_ids),
                self.timestamps.tolist(),
                self.store_timestamps.tolist(),
                self.values.to_list(),
                self.header_lists(),
            )
        )


def concat_batches(parts: list[ReadBatch], next_offset: int) -> ReadBatch:
    first = parts[0]
    if len(parts) == 1:
        first.next_offset = next_offset
        return first
    return ReadBatch(
        first.topic,
        first.partition,
        np.concatenate([p.offsets for p in parts]),
        np.concatenate([p.timestamps for p in parts]),
        np.concatenate([p.store_timestamps for p in parts]),
        concat_columns([p.keys for p in parts]),
        concat_columns([p.tags for p in parts]),
        concat_columns([p.msg_ids for p in parts]),
        concat_columns([p.values for p in parts]),
        next_offset,
        _concat_headers(parts),
    )


def head_of_parts(parts: list[ReadBatch], k: int) -> list[ReadBatch]:
    """The batches holding the first ``k`` messages of ``parts`` (the last one cut)."""
    out: list[ReadBatch] = []
    for part in parts:
        if k <= 0:
            break
        out.append(part.head(k))
        k -= len(part)
    return out


def offset_of_row(parts: list[ReadBatch], i: int) -> int:
    """The offset of message ``i`` of ``parts`` taken as one sequence."""
    for part in parts:
        if i < len(part):
            return int(part.offsets[i])
        i -= len(part)
    raise IndexError(i)


def _concat_headers(parts: list[ReadBatch]) -> PackedColumn | None:
    if all(p.headers is None for p in parts):
        return None
    return concat_columns(
        [
            PackedColumn(b"", np.zeros(len(p), np.int64)) if p.headers is None else p.headers
            for p in parts
        ]
    )


def _head(col: PackedColumn, k: int) -> PackedColumn:
    lens = col.lens[:k]
    size = int(np.maximum(lens, 0).sum()) if k else 0
    return PackedColumn(memoryview(col.blob)[:size], lens)


def _texts(col: PackedColumn) -> list[str | None]:
    """A text column as str objects (None = absent), one decode for an ASCII blob."""
    lens = col.lens
    n = len(lens)
    if col.absent():
        return [None] * n
    blob = bytes(col.blob)
    if not blob.isascii():
        return [None if b is None else b.decode() for b in col.to_list()]
    text = blob.decode("ascii")
    sizes = np.maximum(lens, 0)
    ends = np.cumsum(sizes).tolist()
    starts = (np.cumsum(sizes) - sizes).tolist()
    if col.length_range()[0] >= 0:
        return [text[s:e] for s, e in zip(starts, ends, strict=True)]
    present = (lens >= 0).tolist()
    return [text[s:e] if p else None for s, e, p in zip(starts, ends, present, strict=True)]
