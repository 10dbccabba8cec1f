"""The record-batch codec of the Kafka listener: what a produced batch becomes in the store's
columns, what a page of rows becomes in a Fetch answer, and the refusals of bad batches."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from aiokafka.record._crecords import DefaultRecordBatch, DefaultRecordBatchBuilder

from storage_node.formats.packed import PackedColumn, headers_column
from storage_node.kafka.records import (
    MSG_ID_HEADER,
    TAG_HEADER,
    CorruptBatch,
    UnsupportedBatch,
    decode_batch,
    encode_batch,
)

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def col(items: list) -> PackedColumn:
    return PackedColumn.of_bytes(items)


def build(records, codec: int = 0, producer=(-1, -1, -1), transactional: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, transactional, *producer, 2**30)
    for i, (key, value, headers) in enumerate(records):
        builder.append(i, 1_700_000_000_000 + i, key, value, headers)
    return bytes(builder.build())


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_batch_becomes_the_stores_columns(codec: str):
    records = [
        (b"k1", b"\x00\xffbinary", []),
        (None, b"", []),
        (b"k3", None, [(TAG_HEADER, b"blue"), ("other", b"dropped")]),
    ]
    got = decode_batch(build(records, CODECS[codec], producer=(42, 3, 7)))
    packed = got.packed
    assert packed.keys.to_list() == [b"k1", None, b"k3"]
    assert packed.values.to_list() == [b"\x00\xffbinary", b"", b""]  # null value: empty
    assert packed.tags.to_list() == [None, None, b"blue"]
    assert packed.timestamps.tolist() == [1_700_000_000_000 + i for i in range(3)]
    assert (got.producer_id, got.producer_epoch, got.base_sequence) == (42, 3, 7)


def test_rows_become_one_batch_with_id_and_tag_headers():
    offsets = np.array([10, 11, 13], dtype=np.int64)
    data = encode_batch(
        10,
        offsets,
        np.array([5, 6, 7], dtype=np.int64),
        col([b"a", None, b"c"]),
        col([b"x", b"y", b"z"]),
        col([None, b"red", None]),
        col([b"id-1", b"id-2", b"id-3"]),
    )
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc() and batch.base_offset == 10
    rows = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert rows == [
        (10, 5, b"a", b"x", [(MSG_ID_HEADER, b"id-1")]),
        (11, 6, None, b"y", [(MSG_ID_HEADER, b"id-2"), (TAG_HEADER, b"red")]),
        (13, 7, b"c", b"z", [(MSG_ID_HEADER, b"id-3")]),
    ]


def test_bad_batches_are_refused():
    good = build([(b"k", b"v", [])])
    flipped = bytearray(good)
    flipped[-1] ^= 1
    with pytest.raises(CorruptBatch, match="CRC"):
        decode_batch(bytes(flipped))
    with pytest.raises(CorruptBatch, match="bytes"):
        decode_batch(good + b"\0")
    with pytest.raises(CorruptBatch, match="needs 61 bytes"):
        decode_batch(good[:30])
    old_magic = bytearray(good)
    old_magic[16] = 1
    with pytest.raises(UnsupportedBatch, match="magic 1"):
        decode_batch(bytes(old_magic))
    with pytest.raises(UnsupportedBatch, match="transactional"):
        decode_batch(build([(b"k", b"v", [])], producer=(1, 0, 0), transactional=1))
    wrong_count = bytearray(good)
    struct.pack_into(">i", wrong_count, 57, 2)  # the record count (inside the CRC)
    with pytest.raises(CorruptBatch):
        decode_batch(bytes(wrong_count))


def test_headers_are_kept_byte_exact_and_given_back_before_msgstores_own():
    headers = [("dup", b"1"), (MSG_ID_HEADER, b"t-7f000001-1-1"), ("dup", None), ("bin", b"\xff")]
    got = decode_batch(build([(b"k", b"v", headers), (b"k", b"w", [])]))
    stored = got.packed.headers
    assert stored is not None
    assert got.packed.msg_ids.to_list() == [b"t-7f000001-1-1", None]
    kept = [(n, v) for n, v in headers if n != MSG_ID_HEADER]
    data = encode_batch(
        0,
        np.array([0, 1], dtype=np.int64),
        np.array([5, 6], dtype=np.int64),
        col([b"k", b"k"]),
        col([b"v", b"w"]),
        col([b"red", None]),
        col([b"id-1", b"id-2"]),
        headers_column([tuple(kept), ()]),
    )
    rows = [r.headers for r in DefaultRecordBatch(data)]
    assert rows == [
        [*kept, (MSG_ID_HEADER, b"id-1"), (TAG_HEADER, b"red")],
        [(MSG_ID_HEADER, b"id-2")],
    ]


def test_headers_over_the_record_limit_are_refused():
    from storage_node.errors import InvalidBatch

    with pytest.raises(InvalidBatch, match="headers longer"):
        decode_batch(build([(b"k", b"v", [("big", b"x" * 70_000)])]))
