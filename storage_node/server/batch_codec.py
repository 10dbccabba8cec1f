"""Binary batch framing for ``application/x-msgstore-batch`` (layout in docs/BATCH_FORMAT.md).

A batch is a fixed header followed by column arrays and concatenated byte blobs, so
decoding costs a few numpy calls plus one slice per field instead of a JSON parse per
message. The same module encodes, for the client.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from storage_node.errors import InvalidBatch

CONTENT_TYPE = "application/x-msgstore-batch"
MAGIC = b"MSB1"
HEADER = struct.Struct("<4sIqHH")  # magic, count, sequence, producer id length, flags
MAX_MESSAGES = 1_000_000
_NONE = -1


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

    def __len__(self) -> int:
        return len(self.values)


def _lengths(values: Sequence[bytes | None]) -> np.ndarray:
    return np.fromiter(
        (_NONE if v is None else len(v) for v in values), dtype="<i4", count=len(values)
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
) -> bytes:
    """Frame one batch. Columns left out mean 'not given' for every message."""
    count = len(values)
    none_column = [None] * count

    def text_column(column: Sequence[str | None] | None) -> list[bytes | None]:
        if column is None:
            return none_column
        return [None if s is None else s.encode("utf-8") for s in column]

    def int_column(column: Sequence[int | None] | None, dtype: str) -> bytes:
        if column is None:
            return np.full(count, _NONE, dtype=dtype).tobytes()
        return np.fromiter(
            (_NONE if v is None else v for v in column), dtype=dtype, count=count
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
    pid = (producer_id or "").encode("utf-8")
    key_b, tag_b, id_b = text_column(keys), text_column(tags), text_column(msg_ids)
    parts = [
        HEADER.pack(MAGIC, count, _NONE if sequence is None else sequence, len(pid), 0),
        pid,
        int_column(partitions, "<i4"),
        int_column(timestamps, "<i8"),
        _lengths(key_b).tobytes(),
        _lengths(tag_b).tobytes(),
        _lengths(id_b).tobytes(),
        _lengths(values).tobytes(),
        b"".join(k for k in key_b if k is not None),
        b"".join(t for t in tag_b if t is not None),
        b"".join(i for i in id_b if i is not None),
        b"".join(values),
    ]
    return b"".join(parts)


def _split_text(blob: bytes, lengths: np.ndarray, what: str) -> list[str | None]:
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


def decode_batch(body: bytes) -> DecodedBatch:
    """Parse a framed batch; any inconsistency raises InvalidBatch naming it."""
    if len(body) < HEADER.size:
        raise InvalidBatch(f"batch too short for its {HEADER.size}-byte header")
    magic, count, sequence, pid_len, flags = HEADER.unpack_from(body, 0)
    if magic != MAGIC:
        raise InvalidBatch(f"bad batch magic {magic!r}, expected {MAGIC!r}")
    if flags != 0:
        raise InvalidBatch(f"unknown batch flags {flags:#x}")
    if count > MAX_MESSAGES:
        raise InvalidBatch(f"batch holds {count} messages, at most {MAX_MESSAGES} allowed")
    pos = HEADER.size
    arrays_size = pid_len + count * (4 + 8 + 4 * 4)
    if len(body) < pos + arrays_size:
        raise InvalidBatch("batch truncated inside its column arrays")
    try:
        producer_id = body[pos : pos + pid_len].decode("utf-8") if pid_len else None
    except UnicodeDecodeError:
        raise InvalidBatch("producer id is not valid UTF-8") from None
    pos += pid_len

    def column(dtype: str, width: int) -> np.ndarray:
        nonlocal pos
        arr = np.frombuffer(body, dtype=dtype, count=count, offset=pos)
        pos += count * width
        return arr

    partitions = column("<i4", 4)
    timestamps = column("<i8", 8)
    key_lens, tag_lens, id_lens = column("<i4", 4), column("<i4", 4), column("<i4", 4)
    value_lens = column("<i4", 4)
    if count and (value_lens < 0).any():
        raise InvalidBatch("every message needs a value (value length -1 found)")
    if count and ((partitions < _NONE).any() or (timestamps < _NONE).any()):
        raise InvalidBatch("partitions and timestamps must be >= 0 (or -1 for 'not given')")
    blobs = []
    for lens in (key_lens, tag_lens, id_lens, value_lens):
        if count and (lens < _NONE).any():
            raise InvalidBatch("field lengths must be >= 0 (or -1 for 'absent')")
        size = int(lens[lens > 0].sum(dtype=np.int64)) if count else 0
        if pos + size > len(body):
            raise InvalidBatch("batch truncated inside its data blobs")
        blobs.append(body[pos : pos + size])
        pos += size
    if pos != len(body):
        raise InvalidBatch(f"{len(body) - pos} unexpected bytes after the batch")
    if count:
        ends = np.cumsum(value_lens, dtype=np.int64).tolist()
        starts = [0, *ends[:-1]]
        vblob = blobs[3]
        values = [vblob[s:e] for s, e in zip(starts, ends, strict=True)]
    else:
        values = []
    return DecodedBatch(
        values=values,
        keys=_split_text(blobs[0], key_lens, "key"),
        tags=_split_text(blobs[1], tag_lens, "tag"),
        msg_ids=_split_text(blobs[2], id_lens, "message ID"),
        timestamps=[None if t < 0 else t for t in timestamps.tolist()],
        partitions=[None if p < 0 else p for p in partitions.tolist()],
        producer_id=producer_id,
        sequence=None if sequence < 0 else sequence,
    )
