"""The compiled record codec against an implementation nobody here wrote: aiokafka's own
record-batch builder and reader (Kafka's v2 format, Cython). Random records go both ways
(multi-byte varints, null keys and values, negative timestamp deltas, headers with repeated
names and null values, msgstore's own headers), and bytes cut or changed anywhere in a
batch's records are refused with CorruptBatch or read exactly as aiokafka reads them: never
a crash, never other records."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from aiokafka.record._crecords import DefaultRecordBatch, DefaultRecordBatchBuilder
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_node.errors import InvalidBatch
from storage_node.formats.headers import decode_headers
from storage_node.formats.packed import PackedColumn, headers_column
from storage_node.kafka.record_codec import decode_records
from storage_node.kafka.records import (
    HEADER_SIZE,
    MSG_ID_HEADER,
    TAG_HEADER,
    CorruptBatch,
    decode_batch,
    encode_batch,
)

BASE_TS = 1_700_000_000_000
names = st.sampled_from(["a", "trace-id", "dup", "é✓", "x" * 130])
header = st.tuples(names, st.one_of(st.none(), st.binary(max_size=300)))
record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=200)),  # key
    st.one_of(st.none(), st.binary(max_size=400)),  # value
    st.lists(header, max_size=4),
    st.integers(-(2**40), 2**40),  # timestamp delta
)


def build(records: list, codec: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 2**30)
    for i, (key, value, headers, delta) in enumerate(records):
        builder.append(i, BASE_TS + delta, key, value, headers)
    return bytes(builder.build())


@settings(max_examples=50, deadline=None)
@given(st.lists(record, min_size=1, max_size=40), st.sampled_from([0, 1, 3]))
def test_a_batch_aiokafka_builds_reads_as_aiokafka_reads_it(records: list, codec: int) -> None:
    data = build(records, codec)
    expected = list(DefaultRecordBatch(data))
    got = decode_batch(data).packed
    assert got.keys.to_list() == [r.key for r in expected]
    assert got.values.to_list() == [r.value or b"" for r in expected]
    assert got.timestamps.tolist() == [r.timestamp for r in expected]
    stored = [] if got.headers is None else got.headers.to_list()
    headers = [decode_headers(h) if h else () for h in stored] or [()] * len(expected)
    assert [list(h) for h in headers] == [r.headers for r in expected]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(record, min_size=1, max_size=40),
    st.lists(st.one_of(st.none(), st.binary(min_size=1, max_size=20)), min_size=40, max_size=40),
    st.integers(0, 2**40),
)
def test_rows_encoded_read_back_in_aiokafka(records: list, tag_pool: list, base: int) -> None:
    n = len(records)
    offsets = base + np.cumsum(np.array([1 + (i % 3) for i in range(n)], dtype=np.int64)) - 1
    timestamps = np.array([BASE_TS + r[3] for r in records], dtype=np.int64)
    ids = [f"app-7f000001-{i}-{i * 7}".encode() for i in range(n)]
    tags = tag_pool[:n]
    kept = [tuple(h) for _k, _v, h, _d in records]
    data = encode_batch(
        int(offsets[0]),
        offsets,
        timestamps,
        PackedColumn.of_bytes([r[0] for r in records]),
        PackedColumn.of_bytes([r[1] or b"" for r in records]),
        PackedColumn.of_bytes(tags),
        PackedColumn.of_bytes(ids),
        headers_column(kept),
    )
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc() and batch.base_offset == int(offsets[0])
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert got == [
        (
            int(offsets[i]),
            int(timestamps[i]),
            records[i][0],
            records[i][1] or b"",
            [*kept[i], (MSG_ID_HEADER, ids[i])] + ([(TAG_HEADER, tags[i])] if tags[i] else []),
        )
        for i in range(n)
    ]
    assert struct.unpack_from(">i", data, 57)[0] == n
    assert struct.unpack_from(">q", data, 35)[0] == int(timestamps.max())


def _recrc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


@settings(max_examples=120, deadline=None)
@given(st.lists(record, min_size=1, max_size=8), st.data())
def test_changed_or_cut_records_are_refused_or_read_exactly(records: list, draw: st.DataObject):
    good = bytearray(build(records))
    at = draw.draw(st.integers(HEADER_SIZE, len(good) - 1))
    bad = bytearray(good)
    if draw.draw(st.booleans()):
        bad[at] = draw.draw(st.integers(0, 255))
    else:  # cut: the batch's own length follows, so only the records are short
        del bad[at:]
        struct.pack_into(">i", bad, 8, len(bad) - 12)
    try:
        reference = list(DefaultRecordBatch(_recrc(bad)))
    except Exception:  # noqa: BLE001 - aiokafka refuses it one way or another
        reference = None
    try:
        got = decode_batch(_recrc(bad)).packed
    except InvalidBatch:
        return  # refused (CorruptBatch or a header over the limit): nothing is taken
    assert reference is not None, "aiokafka refuses what the codec took"
    assert len(got) == len(reference)
    assert got.keys.to_list() == [r.key for r in reference]
    assert got.values.to_list() == [r.value or b"" for r in reference]


def test_the_record_count_must_match_the_records_exactly() -> None:
    data = build([(b"k", b"v", [], 0), (b"k", b"w", [], 1)])
    body = data[HEADER_SIZE:]
    with pytest.raises(ValueError, match="bytes follow the last record"):
        decode_records(body, 1)
    with pytest.raises(ValueError, match="record 2"):
        decode_records(body, 3)
    assert decode_records(body, 2)[3].tolist() == [1, 1]
    too_many = bytearray(data)
    struct.pack_into(">i", too_many, 57, 3)
    with pytest.raises(CorruptBatch, match="record 2"):
        decode_batch(_recrc(too_many))


def test_a_header_name_that_is_not_utf8_is_corrupt() -> None:
    data = build([(b"k", b"v", [("n", b"1")], 0)])
    at = data.index(b"\x02n") + 1  # the name's one byte, after its varint length
    bad = bytearray(data)
    bad[at] = 0xFF
    with pytest.raises(CorruptBatch, match="utf-8"):
        decode_batch(_recrc(bad))
