"""The compiled record codec against implementations nobody here wrote. Random records go
both ways through aiokafka's own record-batch builder and reader (multi-byte varints, null
keys and values, negative timestamp deltas, headers with repeated names and null values,
msgstore's own headers). Bytes cut or changed anywhere in a batch's records are refused
exactly where Kafka's own reading (DefaultRecord.readFrom, restated here from Kafka's
source) refuses them, and otherwise read as it reads them: never a crash, never other
records. aiokafka is not the judge of broken bytes: it reads a record's one-byte attributes
as a varint."""

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


def kafka_reads(section: bytes, count: int) -> list[tuple] | None:
    """How Kafka reads a records section, written from its source (``DefaultRecord.readFrom``
    with ``ByteUtils.readVarint``/``readVarlong``): one byte of attributes, the timestamp
    delta a varlong (at most 10 bytes), every other number a varint (at most 5 bytes, an
    int32); a negative length is null; a header name must be there. Returns (key, value,
    timestamp delta, headers) per record, or None where Kafka refuses. msgstore is stricter in
    two ways, kept here: a header name must be UTF-8 (Java would replace bad bytes), and no
    byte may follow the last record."""
    pos = 0

    def number(bits: int) -> int:
        nonlocal pos
        value = shift = 0
        while True:
            b = section[pos]  # IndexError: cut
            pos += 1
            if b < 0x80:
                break
            value |= (b & 0x7F) << shift
            shift += 7
            if shift > (28 if bits == 32 else 63):
                raise ValueError("varint too long")
        value = (value | b << shift) & ((1 << bits) - 1)
        value = (value >> 1) ^ (-(value & 1) & ((1 << bits) - 1))
        return value - (1 << bits) if value >= 1 << (bits - 1) else value

    def take(size: int) -> bytes:
        nonlocal pos
        if pos + size > len(section):
            raise IndexError("cut")
        pos += size
        return section[pos - size : pos]

    out = []
    try:
        for _ in range(count):
            length = number(32)
            start = pos
            if length < 0 or start + length > len(section):
                return None
            take(1)  # attributes
            delta = number(64)
            number(32)  # offset delta
            size = number(32)
            key = take(size) if size >= 0 else None
            size = number(32)
            value = take(size) if size >= 0 else None
            headers = []
            n = number(32)
            if n < 0:
                return None
            for _h in range(n):
                size = number(32)
                if size < 0:
                    return None
                name = take(size).decode("utf-8")
                size = number(32)
                headers.append((name, take(size) if size >= 0 else None))
            if pos - start != length:
                return None
            out.append((key, value, delta, headers))
    except (IndexError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return out if pos == len(section) else None


def _wrap64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


@settings(max_examples=120, deadline=None)
@given(st.lists(record, min_size=1, max_size=8), st.data())
def test_changed_or_cut_records_are_read_as_kafka_reads_them(records: list, draw: st.DataObject):
    good = bytearray(build(records))
    at = draw.draw(st.integers(HEADER_SIZE, len(good) - 1))
    bad = bytearray(good)
    if draw.draw(st.booleans()):
        bad[at] = draw.draw(st.integers(0, 255))
    else:  # cut: the batch's own length follows, so only the records are short
        del bad[at:]
        struct.pack_into(">i", bad, 8, len(bad) - 12)
    count = struct.unpack_from(">i", bad, 57)[0]
    expected = kafka_reads(bytes(bad[HEADER_SIZE:]), count)
    try:
        got = decode_batch(_recrc(bad)).packed
    except InvalidBatch:
        assert expected is None, "the codec refuses what Kafka reads"
        return  # refused: nothing is taken
    assert expected is not None, "the codec takes what Kafka refuses"
    assert got.keys.to_list() == [k for k, _v, _d, _h in expected]
    assert got.values.to_list() == [v or b"" for _k, v, _d, _h in expected]
    first = struct.unpack_from(">q", bad, 27)[0]
    assert got.timestamps.tolist() == [_wrap64(first + d) for _k, _v, d, _h in expected]
    special = {TAG_HEADER, MSG_ID_HEADER}
    kept = [[h for h in hs if not (h[0] in special and h[1] is not None)] for *_r, hs in expected]
    stored = [] if got.headers is None else got.headers.to_list()
    got_headers = [list(decode_headers(h)) if h else [] for h in stored] or [[] for _ in kept]
    assert got_headers == kept


def test_kafkas_reading_of_numbers_and_nulls_is_followed() -> None:
    """Kafka's readVarint keeps an int32 (a 5-byte varint wraps), any negative length is
    null, and a record's attributes are one byte even with the high bit set (aiokafka reads
    them as a varint)."""
    data = bytearray(build([(b"k", b"v", [], 0)]))
    attributes = HEADER_SIZE + 1  # after the record's one-byte length
    data[attributes] = 0x80
    assert decode_batch(_recrc(data)).packed.keys.to_list() == [b"k"]
    # a record: attributes, ts 0, offset 0, key length -3 (null), value length -1 (null), 0 headers
    body = bytes([0x00, 0x00, 0x00, 0x05, 0x01, 0x00])
    section = bytes([len(body) * 2]) + body
    keys, key_lens, _v, value_lens, *_rest = decode_records(section, 1)
    assert key_lens.tolist() == [-1] and value_lens.tolist() == [0]
    # a 6-byte varint length is longer than Kafka's varint: refused
    with pytest.raises(ValueError, match="length"):
        decode_records(bytes([0x80, 0x80, 0x80, 0x80, 0x80, 0x00]) + body, 1)
    assert kafka_reads(section, 1) == [(None, None, 0, [])]


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
