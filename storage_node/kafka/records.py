"""Kafka record batches (v2, "magic 2") in and out.

In: the one batch a Produce request carries for a partition is checked (size, magic, CRC-32C,
not transactional), decompressed when it is (gzip/snappy/lz4/zstd, ``decompress.py``: at most
64 MiB out, so a decompression bomb is refused) and its records read by the compiled record codec (``record_codec.pyx``) straight
into the store's packed columns: keys, values, born timestamps and headers. Out: the rows of
a columnar read become one uncompressed batch, its records written by the same codec from
the read's columns, with the message's ID and tag as headers.

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
from crc32c import crc32c

from storage_node.errors import InvalidBatch, MessageTooLarge
from storage_node.formats.packed import PackedBatch, PackedColumn, filled
from storage_node.kafka import decompress as decompression
from storage_node.kafka.record_codec import HeadersTooLong, decode_records, encode_records

TAG_HEADER = "msgstore.tag"
MSG_ID_HEADER = "msgstore.msg_id"
_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 batch header
HEADER_SIZE = _HEADER.size
_CRC_AT = 17  # the CRC field's place in the header
_CRC_FROM = 21  # the CRC covers the batch from its attributes on
_TAG_NAME = TAG_HEADER.encode()
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
        crc,
        attributes,
        _last_delta,
        first_ts,
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
    if crc32c(memoryview(data)[_CRC_FROM:]) != crc & 0xFFFFFFFF:
        raise CorruptBatch("the batch's CRC-32C does not match its bytes")
    codec = attributes & 0x07
    records: bytes | memoryview = memoryview(data)[HEADER_SIZE:]
    if codec:
        decompress = decompression.CODECS.get(codec)
        if decompress is None:
            raise CorruptBatch(f"unknown compression codec {codec}")
        try:
            records = decompress(bytes(records), decompression.MAX_DECOMPRESSED_BYTES)
        except MessageTooLarge:
            raise
        except Exception as exc:  # noqa: BLE001 - each codec raises its own errors
            raise CorruptBatch(f"the records do not decompress: {exc}") from None
    try:
        keys, key_lens, values, value_lens, deltas, headers, header_lens, special = decode_records(
            records, count
        )
    except HeadersTooLong as exc:
        raise InvalidBatch(str(exc)) from None
    except ValueError as exc:  # the codec says which record and what
        raise CorruptBatch(f"the records do not parse: {exc}") from None
    tags, ids = _special_columns(count, special)
    packed = PackedBatch(
        values=PackedColumn(values, value_lens),
        keys=PackedColumn(keys, key_lens),
        tags=tags,
        msg_ids=ids,
        timestamps=deltas + first_ts,
        headers=None
        if headers is None or header_lens is None
        else PackedColumn(headers, header_lens),
    )
    return IncomingBatch(packed, producer_id, producer_epoch, base_sequence, max_ts)


def _special_columns(
    count: int, special: list[tuple[int, bytes, bytes]]
) -> tuple[PackedColumn, PackedColumn]:
    """The tag and message-ID columns the ``msgstore.*`` headers give (a later header of a
    record wins); both absent in the usual batch, which has none."""
    if not special:
        return PackedColumn.empty(count), PackedColumn.empty(count)
    tags: list[str | None] = [None] * count
    ids: list[str | None] = [None] * count
    for row, name, value in special:
        column = tags if name == _TAG_NAME else ids
        column[row] = value.decode("utf-8", "replace")
    return PackedColumn.of_text(tags, "tag"), PackedColumn.of_text(ids, "message ID")


def encode_batch(
    base_offset: int,
    offsets: np.ndarray,
    timestamps: np.ndarray,
    keys: PackedColumn,
    values: PackedColumn,
    tags: PackedColumn,
    msg_ids: PackedColumn,
    headers: PackedColumn | None = None,
) -> bytearray:
    """One uncompressed v2 batch of these rows (offsets absolute, ascending, the first one
    ``base_offset``); each record's stored headers first, then its message ID and tag."""
    n = len(offsets)
    first_ts = int(timestamps[0])
    no_headers = filled(n, -1)
    out = encode_records(
        np.ascontiguousarray(offsets - base_offset, dtype=np.int64),
        np.ascontiguousarray(timestamps - first_ts, dtype=np.int64),
        keys.blob,
        _lens(keys),
        values.blob,
        _lens(values),
        msg_ids.blob,
        _lens(msg_ids),
        tags.blob,
        _lens(tags),
        b"" if headers is None else headers.blob,
        no_headers if headers is None else _lens(headers),
        HEADER_SIZE,
    )
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        len(out) - 12,  # the batch length counts from the leader epoch on
        -1,  # partition leader epoch
        2,  # magic
        0,  # CRC, set below
        0,  # attributes: uncompressed, create time, not transactional
        int(offsets[-1]) - base_offset,
        first_ts,
        int(timestamps.max()),
        -1,  # producer id
        -1,  # producer epoch
        -1,  # base sequence
        n,
    )
    struct.pack_into(">I", out, _CRC_AT, crc32c(memoryview(out)[_CRC_FROM:]))
    return out


class RecordBatches:
    """A partition's record batches in a Fetch answer, one after another, kept as separate
    buffers: the answer's writer (``listener.AnswerParts``) sends each by reference, so
    nothing joins them. ``len`` is their size in bytes (the field's length prefix)."""

    __slots__ = ("batches", "size")

    def __init__(self, batches: list[bytearray]) -> None:
        self.batches = batches
        self.size = sum(len(b) for b in batches)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.batches)


def _lens(column: PackedColumn) -> np.ndarray:
    return np.ascontiguousarray(column.lens, dtype=np.int64)
