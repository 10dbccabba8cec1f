"""The multi-partition fetch answer (docs/BATCH_FORMAT.md, "Fetch answer").

One request reads pages of several partitions of a topic, as Kafka's fetch does; the binary
answer is the pages' read answers back to back, each behind its partition and length, so a
page decodes exactly as a single-partition read answer::

    b"MSF1"  u32 page count
    per page:  i32 partition, u32 length, then ``length`` bytes of a read answer (MSR1)
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from storage_node.formats.limits import MAX_PARTITIONS
from storage_node.wire.read_answer import MalformedAnswer, ReadColumns, decode_read_answer

Buffer = bytes | bytearray | memoryview

FETCH_MAGIC = b"MSF1"
FETCH_HEADER = struct.Struct("<4sI")
PAGE_HEADER = struct.Struct("<iI")


def encode_fetch_answer(pages: Mapping[int, Sequence[Buffer]]) -> bytes:
    """The answer from each page's read answer given as its pieces (``read_answer_parts``):
    one join copies every byte once."""
    parts: list[Buffer] = [FETCH_HEADER.pack(FETCH_MAGIC, len(pages))]
    for partition, pieces in pages.items():
        parts.append(PAGE_HEADER.pack(partition, sum(memoryview(x).nbytes for x in pieces)))
        parts.extend(pieces)
    return b"".join(parts)


def decode_fetch_answer(body: bytes | bytearray | memoryview) -> dict[int, ReadColumns]:
    """Pages by partition; any inconsistency raises MalformedAnswer."""
    view = memoryview(body).cast("B")
    if len(view) < FETCH_HEADER.size:
        raise MalformedAnswer("fetch answer too short for its header")
    magic, count = FETCH_HEADER.unpack_from(view, 0)
    if magic != FETCH_MAGIC:
        raise MalformedAnswer(f"bad fetch answer magic {magic!r}, expected {FETCH_MAGIC!r}")
    if count > MAX_PARTITIONS:  # a page per partition of the topic
        raise MalformedAnswer(f"fetch answer claims {count} pages, at most {MAX_PARTITIONS}")
    pos = FETCH_HEADER.size
    pages: dict[int, ReadColumns] = {}
    for _ in range(count):
        if pos + PAGE_HEADER.size > len(view):
            raise MalformedAnswer("fetch answer truncated inside a page header")
        partition, length = PAGE_HEADER.unpack_from(view, pos)
        pos += PAGE_HEADER.size
        if partition < 0 or partition in pages:
            raise MalformedAnswer(f"fetch answer holds partition {partition} twice or negative")
        if pos + length > len(view):
            raise MalformedAnswer("fetch answer truncated inside a page")
        pages[partition] = decode_read_answer(view[pos : pos + length])
        pos += length
    if pos != len(view):
        raise MalformedAnswer(f"{len(view) - pos} unexpected bytes after the fetch answer's pages")
    return pages


def fetch_request(
    positions: Mapping[int, int],
    max_messages: int,
    max_bytes: int | None,
    wait_ms: int | None,
    tag: str | None = None,
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/topics/{topic}/fetch``."""
    doc: dict[str, Any] = {
        "partitions": [{"partition": p, "offset": o} for p, o in positions.items()],
        "max_messages": max_messages,
    }
    if max_bytes is not None:
        doc["max_bytes"] = max_bytes
    if wait_ms:
        doc["wait_ms"] = wait_ms
    if tag is not None:
        doc["tag"] = tag
    return doc
