"""Kafka record batches (v2, "magic 2") in and out, with aiokafka's compiled (Cython) codec.

In: the one batch a Produce request carries for a partition is checked (size, magic, CRC,
not transactional) and read record by record by the compiled reader, which also
decompresses gzip/snappy/lz4/zstd (through cramjam); keys, values and born timestamps become
the store's packed columns. Out: the rows of a columnar read become one uncompressed batch
built by the compiled builder, with the message's tag and ID as headers.

Data model (docs/KAFKA.md): Kafka key = msgstore key (UTF-8 text: a key that is not is
refused as INVALID_RECORD), timestamp = born time, value byte for byte (a null value is
stored as an empty one), headers stored byte for byte (same order, repeated names and null
values kept) in the record's headers column. ``msgstore.tag`` and ``msgstore.msg_id`` set the
message's tag and ID instead of being stored, and every fetched record carries its
message's ID and tag as those two headers, after its own headers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from aiokafka.record._crecords import DefaultRecordBatch, DefaultRecordBatchBuilder

from storage_node.errors import InvalidBatch
from storage_node.formats.headers import Headers
from storage_node.formats.packed import PackedBatch, PackedColumn, headers_column

TAG_HEADER = "msgstore.tag"
MSG_ID_HEADER = "msgstore.msg_id"
_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 batch header
HEADER_SIZE = _HEADER.size
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


class CorruptBatch(InvalidBatch):
    """The bytes are not one well-formed v2 batch (Kafka's CORRUPT_MESSAGE)."""


class UnsupportedBatch(InvalidBatch):
    """A well-formed batch of a kind the node does not take (old magic, transactions)."""


@dataclass
class IncomingBatch:
    """One produced batch as the store's columns plus its idempotence fields."""

    packed: PackedBatch
    producer_id: int
    producer_epoch: int
    base_sequence: int
    max_timestamp: int

    def __len__(self) -> int:
        return len(self.packed)


def decode_batch(data: bytes | memoryview) -> IncomingBatch:
    """Check and read the single v2 batch of a partition's produce data (value sizes, key
    text and the rest are the store's checks, made before anything is written)."""
    data = bytes(data)
    if len(data) < HEADER_SIZE:
        raise CorruptBatch(f"a record batch needs {HEADER_SIZE} bytes, got {len(data)}")
    (
        _base,
        length,
        _leader_epoch,
        magic,
        _crc,
        attributes,
        _last_delta,
        _first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(data)
    if magic != 2:
        raise UnsupportedBatch(f"record batches of magic {magic} are not supported (only 2)")
    if length + 12 != len(data):
        raise CorruptBatch(
            f"the batch says {length + 12} bytes but {len(data)} were sent "
            "(one batch per partition and request)"
        )
    if attributes & (_TRANSACTIONAL | _CONTROL):
        raise UnsupportedBatch("transactional and control batches are not supported")
    if count <= 0:
        raise CorruptBatch(f"a batch of {count} records")
    batch = DefaultRecordBatch(data)
    if not batch.validate_crc():
        raise CorruptBatch("the batch's CRC-32C does not match its bytes")
    try:
        records = list(batch)  # compiled: decompresses and reads every record
    except Exception as exc:  # noqa: BLE001 - the codec's errors for bad bytes vary
        raise CorruptBatch(f"the records do not parse: {exc}") from None
    if len(records) != count:
        raise CorruptBatch(f"the batch says {count} records and holds {len(records)}")
    keys = [r.key for r in records]
    values = [r.value if r.value is not None else b"" for r in records]
    timestamps = np.fromiter((r.timestamp for r in records), np.int64, len(records))
    tags: list[str | None] = [None] * len(records)
    ids: list[str | None] = [None] * len(records)
    kept: list[list[tuple[str, bytes | None]]] = [[] for _ in records]
    for i, r in enumerate(records):
        if r.headers:
            for name, value in r.headers:
                if name == TAG_HEADER and value is not None:
                    tags[i] = value.decode("utf-8", "replace")
                elif name == MSG_ID_HEADER and value is not None:
                    ids[i] = value.decode("utf-8", "replace")
                else:
                    kept[i].append((name, value))
    packed = PackedBatch(
        values=PackedColumn.of_bytes(values),
        keys=PackedColumn.of_bytes(keys),
        tags=PackedColumn.of_text(tags, "tag"),
        msg_ids=PackedColumn.of_text(ids, "message ID"),
        timestamps=timestamps,
        headers=headers_column(kept),
    )
    return IncomingBatch(packed, producer_id, producer_epoch, base_sequence, max_ts)


def encode_batch(
    base_offset: int,
    offsets: np.ndarray,
    timestamps: np.ndarray,
    keys: list[bytes | None],
    values: list[bytes | None],
    tags: list[bytes | None],
    msg_ids: list[bytes | None],
    stored: list[Headers] | None = None,
) -> bytes:
    """One uncompressed v2 batch of these records (offsets absolute, ascending); each
    record's ``stored`` headers first, then its message ID and tag."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
    deltas = (offsets - base_offset).tolist()
    own = stored if stored is not None else [()] * len(deltas)
    for delta, ts, key, value, tag, msg_id, kept in zip(
        deltas, timestamps.tolist(), keys, values, tags, msg_ids, own, strict=True
    ):
        headers: list[tuple[str, bytes | None]] = [*kept, (MSG_ID_HEADER, msg_id)]
        if tag is not None:
            headers.append((TAG_HEADER, tag))
        builder.append(delta, ts, key, value, headers)
    out = builder.build()
    struct.pack_into(">q", out, 0, base_offset)  # outside the CRC, which starts at attributes
    return bytes(out)
