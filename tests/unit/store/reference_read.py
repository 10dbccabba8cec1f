"""The record-at-a-time definition of ``Store.read`` (the engine's read before it became
columnar), kept to check ``Store.read_columns`` against: one queue entry, one frame fetch
and CRC check, one decoded record at a time."""

from __future__ import annotations

from storage_node.errors import CorruptData
from storage_node.formats.queue_index import tag_hash
from storage_node.store import Store
from storage_node.store.reads import TAG_SCAN_LIMIT, to_message
from storage_node.store.types import Message, ReadResult


def reference_read(
    store: Store,
    topic: str,
    partition: int,
    offset: int,
    max_messages: int = 100,
    max_bytes: int = 1 << 20,
    tag: str | None = None,
) -> ReadResult:
    q, offset, max_messages, max_bytes, nxt = store.reads.read_args(
        topic, partition, offset, max_messages, max_bytes, tag
    )
    out: list[Message] = []
    total = 0
    want_hash = tag_hash(tag.encode()) if tag is not None else None
    cursor = offset
    scanned = 0
    while cursor < nxt and len(out) < max_messages:
        chunk = q.entries(cursor, max_messages if want_hash is None else 1000)
        if not chunk:
            break
        for pos, size, th in chunk:
            if want_hash is not None and th != want_hash:
                cursor += 1
                continue
            if size == 0:
                raise CorruptData(
                    f"{topic}/{partition} offset {cursor} was lost to corruption", offset=cursor
                )
            rec = store.log.read(pos)
            if rec.topic != topic or rec.partition != partition or rec.queue_offset != cursor:
                raise CorruptData(
                    f"queue index of {topic}/{partition} disagrees with the log at offset {cursor}"
                )
            if want_hash is not None and rec.tag != tag:
                cursor += 1
                continue
            if out and total + len(rec.value) > max_bytes:
                return ReadResult(out, cursor)
            out.append(to_message(rec))
            total += len(rec.value)
            cursor += 1
            if len(out) >= max_messages:
                break
        scanned += len(chunk)
        if want_hash is not None and scanned >= TAG_SCAN_LIMIT:
            break
    return ReadResult(out, cursor)
