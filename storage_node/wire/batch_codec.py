"""Binary batch framing for ``application/x-msgstore-batch`` (layout in docs/BATCH_FORMAT.md).

A batch is a fixed header followed by column arrays and concatenated byte blobs, so
decoding costs a few numpy calls plus one slice per field instead of a JSON parse per
message. The same module encodes, for the client. Read answers use the same idea in the
other direction (``read_answer.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from storage_node.errors import InvalidBatch
from storage_node.formats.headers import Headers, check_headers_column, headers_list
from storage_node.formats.packed import PackedBatch, PackedColumn, headers_column

CONTENT_TYPE = "application/x-msgstore-batch"
MAGIC = b"MSB1"
HEADER = struct.Struct("<4sIqHH")  # magic, count, sequence, producer id length, flags
MAX_MESSAGES = 1_000_000
ABSENT = -1  # the length of a field a message does not have (no key, no tag, ...)
# flags: the batch carries a headers column (a length column after the value lengths and a
# blob of formats/headers.py byte strings after the values); a batch without headers sets
# no flag, so nodes from before headers existed take it as they always did
FLAG_HEADERS = 1


@dataclass
class DecodedBatch:
    """Columns of a batch; ``None`` entries mean 'not given'."""

    values: list[bytes]
    keys: list[str | None]
    tags: list[str | None]
    msg_ids: list[str | None]
    timestamps: list[int | None]
    partitions: list[int | None]
    producer_id: str | None
    sequence: int | None
    headers: list[Headers] | None = None

    def __len__(self) -> int:
        return len(self.values)


def lengths_of(values: Sequence[bytes | None]) -> np.ndarray:
    return np.fromiter(
        (ABSENT if v is None else len(v) for v in values), dtype="<i4", count=len(values)
    )


def encode_batch(
    values: Sequence[bytes],
    keys: Sequence[str | None] | None = None,
    tags: Sequence[str | None] | None = None,
    msg_ids: Sequence[str | None] | None = None,
    timestamps: Sequence[int | None] | None = None,
    partitions: Sequence[int | None] | None = None,
    producer_id: str | None = None,
    sequence: int | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
) -> bytes:
    """Frame one batch. Columns left out mean 'not given' for every message; ``headers``:
    each message's (name, value) pairs."""
    count = len(values)
    none_column: list[bytes | None] = [None] * count

    def text_column(column: Sequence[str | None] | None) -> list[bytes | None]:
        if column is None:
            return none_column
        return [None if s is None else s.encode("utf-8") for s in column]

    def int_column(column: Sequence[int | None] | None, dtype: str) -> bytes:
        if column is None:
            return np.full(count, ABSENT, dtype=dtype).tobytes()
        return np.fromiter(
            (ABSENT if v is None else v for v in column), dtype=dtype, count=count
        ).tobytes()

    for name, column in (
        ("keys", keys),
        ("tags", tags),
        ("msg_ids", msg_ids),
        ("timestamps", timestamps),
        ("partitions", partitions),
    ):
        if column is not None and len(column) != count:
            raise InvalidBatch(f"column {name} has {len(column)} entries for {count} values")
    if headers is not None and len(headers) != count:
        raise InvalidBatch(f"column headers has {len(headers)} entries for {count} values")
    packed = headers_column(headers) if headers is not None else None
    pid = (producer_id or "").encode("utf-8")
    key_b, tag_b, id_b = text_column(keys), text_column(tags), text_column(msg_ids)
    flags = FLAG_HEADERS if packed is not None else 0
    parts = [
        HEADER.pack(MAGIC, count, ABSENT if sequence is None else sequence, len(pid), flags),
        pid,
        int_column(partitions, "<i4"),
        int_column(timestamps, "<i8"),
        lengths_of(key_b).tobytes(),
        lengths_of(tag_b).tobytes(),
        lengths_of(id_b).tobytes(),
        lengths_of(values).tobytes(),
        b"".join(k for k in key_b if k is not None),
        b"".join(t for t in tag_b if t is not None),
        b"".join(i for i in id_b if i is not None),
        b"".join(values),
    ]
    if packed is not None:
        parts.insert(8, np.maximum(packed.lens, 0).astype("<i4").tobytes())
        parts.append(bytes(packed.blob))
    return b"".join(parts)


def split_text(blob: bytes, lengths: np.ndarray, what: str) -> list[str | None]:
    """Cut a blob of UTF-8 strings by lengths (-1 = absent) without a decode per string
    when the blob is ASCII."""
    if not len(lengths):
        return []
    if (lengths < 0).all():
        return [None] * len(lengths)
    sizes = np.where(lengths < 0, 0, lengths)
    ends = np.cumsum(sizes, dtype=np.int64).tolist()
    starts = [0, *ends[:-1]]
    present = (lengths >= 0).tolist()
    if blob.isascii():
        text = blob.decode("ascii")
        return [text[s:e] if p else None for s, e, p in zip(starts, ends, present, strict=True)]
    try:
        return [
            blob[s:e].decode("utf-8") if p else None
            for s, e, p in zip(starts, ends, present, strict=True)
        ]
    except UnicodeDecodeError:
        raise InvalidBatch(f"a {what} in the batch is not valid UTF-8") from None


def decode_packed(body: bytes) -> tuple[PackedBatch, str | None, int | None]:
    """Parse a framed batch into the store's packed columns, with no object per message;
    any inconsistency raises InvalidBatch naming it. Returns (batch, producer id, sequence)."""
    if len(body) < HEADER.size:
        raise InvalidBatch(f"batch too short for its {HEADER.size}-byte header")
    magic, count, sequence, pid_len, flags = HEADER.unpack_from(body, 0)
    if magic != MAGIC:
        raise InvalidBatch(f"bad batch magic {magic!r}, expected {MAGIC!r}")
    if flags & ~FLAG_HEADERS:
        raise InvalidBatch(f"unknown batch flags {flags:#x}")
    with_headers = bool(flags & FLAG_HEADERS)
    if count > MAX_MESSAGES:
        raise InvalidBatch(f"batch holds {count} messages, at most {MAX_MESSAGES} allowed")
    pos = HEADER.size
    arrays_size = pid_len + count * (4 + 8 + 4 * 4 + 4 * with_headers)
    if len(body) < pos + arrays_size:
        raise InvalidBatch("batch truncated inside its column arrays")
    try:
        producer_id = body[pos : pos + pid_len].decode("utf-8") if pid_len else None
    except UnicodeDecodeError:
        raise InvalidBatch("producer id is not valid UTF-8") from None
    pos += pid_len

    def column(dtype: str, width: int) -> np.ndarray:
        nonlocal pos
        arr = np.frombuffer(body, dtype=dtype, count=count, offset=pos).astype(np.int64)
        pos += count * width
        return arr

    partitions = column("<i4", 4)
    timestamps = column("<i8", 8)
    key_lens, tag_lens, id_lens = column("<i4", 4), column("<i4", 4), column("<i4", 4)
    value_lens = column("<i4", 4)
    header_lens = column("<i4", 4) if with_headers else None
    if count and (value_lens < 0).any():
        raise InvalidBatch("every message needs a value (value length -1 found)")
    if count and ((partitions < ABSENT).any() or (timestamps < ABSENT).any()):
        raise InvalidBatch("partitions and timestamps must be >= 0 (or -1 for 'not given')")
    columns = []
    for lens in (key_lens, tag_lens, id_lens, value_lens):
        if count and (lens < ABSENT).any():
            raise InvalidBatch("field lengths must be >= 0 (or -1 for 'absent')")
        size = int(lens[lens > 0].sum()) if count else 0
        if pos + size > len(body):
            raise InvalidBatch("batch truncated inside its data blobs")
        columns.append(PackedColumn(body[pos : pos + size], lens))
        pos += size
    headers = None
    if header_lens is not None:
        if count and (header_lens < 0).any():
            raise InvalidBatch("header lengths must be >= 0")
        size = int(header_lens.sum()) if count else 0
        if pos + size > len(body):
            raise InvalidBatch("batch truncated inside its headers")
        headers = PackedColumn(body[pos : pos + size], header_lens)
        check_headers_column(headers.blob, headers.lens)
        pos += size
    if pos != len(body):
        raise InvalidBatch(f"{len(body) - pos} unexpected bytes after the batch")
    if (producer_id is None) != (sequence < 0):
        raise InvalidBatch("producer id and sequence go together")
    batch = PackedBatch(
        values=columns[3],
        keys=columns[0],
        tags=columns[1],
        msg_ids=columns[2],
        timestamps=timestamps if count and (timestamps >= 0).any() else None,
        partitions=partitions if count and (partitions >= 0).any() else None,
        headers=headers,
    )
    return batch, producer_id, None if sequence < 0 else sequence


def decode_batch(body: bytes) -> DecodedBatch:
    """Parse a framed batch into lists (``decode_packed`` is what the node uses)."""
    batch, producer_id, sequence = decode_packed(body)
    stamps = batch.timestamps.tolist() if batch.timestamps is not None else [-1] * len(batch)
    parts = batch.partitions.tolist() if batch.partitions is not None else [-1] * len(batch)
    present = [v for v in batch.values.to_list() if v is not None]  # absent ones are refused
    return DecodedBatch(
        values=present,
        keys=split_text(bytes(batch.keys.blob), batch.keys.lens, "key"),
        tags=split_text(bytes(batch.tags.blob), batch.tags.lens, "tag"),
        msg_ids=split_text(bytes(batch.msg_ids.blob), batch.msg_ids.lens, "message ID"),
        timestamps=[None if t < 0 else t for t in stamps],
        partitions=[None if p < 0 else p for p in parts],
        producer_id=producer_id,
        sequence=sequence,
        headers=None
        if batch.headers is None
        else headers_list(batch.headers.blob, batch.headers.lens),
    )
