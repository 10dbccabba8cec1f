"""The compiled read kernel (storage_node/formats/read_kernel.pyx, through columnar.py's
``_chunk`` and ``_decode_chunk``) against the numpy code it replaced (numpy_rows.py) on
random spans of frames: several topics and partitions, absent and present keys, tags, IDs
and headers, tag filters, and damage of every kind the checks are there for (bytes flipped
under a frame's CRC, rows rewritten with a valid CRC so that only the row checks catch
them, a queue index pointing elsewhere, spans cut short). Both must give the same rows,
columns, frame checks and errors."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_node.formats.headers import encode_headers
from storage_node.formats.packed import PackedColumn
from storage_node.formats.read_kernel import frame_rows, gather_rows
from storage_node.formats.record import FRAME_SIZE, ROW, encode_frames
from storage_node.store.columnar import Rows, Span, _chunk, _decode_chunk
from storage_node.store.read_batch import ReadBatch
from tests.unit.store.numpy_rows import numpy_chunk, numpy_decode_chunk

TOPIC = b"orders"
TAGS = (b"red", b"blue", b"", "grün".encode())
# a row's fields a damaged row may get: (byte offset in the row, struct format)
ROW_FIELDS = (
    (0, "<H"),  # index
    (2, "<H"),  # partition
    (4, "B"),  # flags
    (5, "B"),  # msg_id_len
    (6, "<H"),  # key_len
    (8, "<H"),  # tag_len
    (10, "<H"),  # headers_len
    (12, "<Q"),  # queue offset
    (28, "<I"),  # key_off
    (32, "<I"),  # tag_off
    (36, "<I"),  # msg_id_off
    (40, "<I"),  # value_off
    (44, "<I"),  # value_len
)


def column(draw: st.DrawFn, n: int, options: tuple[bytes, ...], absent: bool) -> PackedColumn:
    entries = [
        None if absent and draw(st.booleans()) else draw(st.sampled_from(options)) for _ in range(n)
    ]
    return PackedColumn.of_bytes(entries)


@st.composite
def batches(draw: st.DrawFn, topic: bytes, first: dict[int, int]) -> tuple[bytes, np.ndarray]:
    """One encoded batch of ``topic`` (partitions 0-2, offsets continuing ``first``): its
    bytes and, per record, (partition, offset, row position in the bytes)."""
    n = draw(st.integers(1, 60))
    parts = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=np.int64)
    offsets = np.empty(n, dtype=np.int64)
    for k, p in enumerate(parts.tolist()):
        offsets[k] = first.get(p, 0)
        first[p] = offsets[k] + 1
    values = column(draw, n, (b"", b"v", b"value " * 7, bytes(range(200))), absent=False)
    keys = column(draw, n, (b"k1", b"key-2", b""), absent=True)
    tags = column(draw, n, TAGS, absent=True)
    ids = column(draw, n, (b"id-1", b"0123456789abcdef"), absent=False)
    headers = None
    if draw(st.booleans()):
        lists = draw(
            st.lists(
                st.sampled_from([(), (("h", b"1"),), (("a", None), ("b", b"xy"))]),
                min_size=n,
                max_size=n,
            )
        )
        headers = PackedColumn.of_bytes([encode_headers(h) for h in lists])
    born = np.array(draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n)))
    encoded = encode_frames(
        topic,
        parts,
        offsets,
        born,
        draw(st.integers(0, 2**40)),
        keys,
        tags,
        ids,
        values,
        target=draw(st.sampled_from([200, 700, 3000])),
        headers=headers,
    )
    data = b"".join(bytes(p) for p in encoded.pieces)
    return data, np.stack([parts, offsets, encoded.row_offsets])


def recrc(buf: bytearray, row_at: int) -> None:
    """Give the frame holding the row at ``row_at`` a valid CRC again (if it is whole)."""
    start = row_at - FRAME_SIZE - ROW * int.from_bytes(buf[row_at : row_at + 2], "little")
    if start < 0 or start + FRAME_SIZE > len(buf):
        return
    size = int.from_bytes(buf[start : start + 4], "little")
    if FRAME_SIZE <= size and start + size <= len(buf):
        struct.pack_into("<I", buf, start + 4, crc32c(bytes(buf[start + 8 : start + size])))


@st.composite
def spans(draw: st.DrawFn) -> tuple[bytes, int, Rows, int]:
    """A span of log bytes, the log position of its first byte, one partition's rows (as the
    queue index gives them, maybe damaged) and the row to start at."""
    first: dict[bytes, dict[int, int]] = {}
    buf = bytearray()
    table = []
    for k in range(draw(st.integers(1, 4))):
        topic = TOPIC if k == 0 else draw(st.sampled_from([TOPIC, b"ordert", b"other-topic"]))
        data, rows = draw(batches(topic, first.setdefault(topic, {})))
        if topic == TOPIC:
            rows = rows.copy()
            rows[2] += len(buf)
            table.append(rows)
        buf += data
    every = np.concatenate(table, axis=1) if table else np.zeros((3, 0), dtype=np.int64)
    partition = draw(st.sampled_from(sorted(set(every[0].tolist())) or [0]))
    mine = every[:, every[0] == partition]
    for _ in range(draw(st.integers(0, 3))):  # rows of the read rewritten under a valid CRC
        if not mine.shape[1]:
            break
        at = int(mine[2][draw(st.integers(0, mine.shape[1] - 1))])
        field, fmt = draw(st.sampled_from(ROW_FIELDS))
        width = struct.calcsize(fmt)
        struct.pack_into(fmt, buf, at + field, draw(st.integers(0, 2 ** (8 * width) - 1)))
        if field != 0 and draw(st.integers(0, 4)):
            recrc(buf, at)
    for _ in range(draw(st.integers(0, 2))):  # bytes flipped under a CRC
        if draw(st.integers(0, 2)) == 0 and len(buf):
            buf[draw(st.integers(0, len(buf) - 1))] ^= 1 << draw(st.integers(0, 7))
    if draw(st.integers(0, 3)) == 0:  # a span cut short
        buf = buf[: draw(st.integers(0, len(buf)))]
    lo = draw(st.sampled_from([0, 4096, 10**9]))
    offsets, positions = mine[1].copy(), mine[2] + lo
    if len(positions) and draw(st.integers(0, 3)) == 0:  # a queue index pointing elsewhere
        k = draw(st.integers(0, len(positions) - 1))
        positions[k] = draw(st.integers(lo - 200, lo + len(buf) + 200))
    if len(offsets) and draw(st.integers(0, 5)) == 0:
        offsets[draw(st.integers(0, len(offsets) - 1))] += draw(st.sampled_from([-1, 1]))
    rows = Rows("orders", partition, offsets, positions, np.full(len(offsets), 150))
    return bytes(buf), lo, rows, draw(st.integers(0, max(0, len(offsets) - 1)))


def same_batch(got: ReadBatch, want: ReadBatch) -> None:
    for name in ("offsets", "timestamps", "store_timestamps"):
        assert getattr(got, name).dtype == np.int64, name
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name
    for name in ("keys", "tags", "msg_ids", "values", "headers"):
        g, w = getattr(got, name), getattr(want, name)
        assert (g is None) == (w is None), name
        if g is not None:
            assert bytes(g.blob) == bytes(w.blob), name
            assert g.lens.tolist() == w.lens.tolist(), name


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spans(), st.sampled_from([None, *TAGS, b"absent"]), st.booleans())
def test_chunks_match_numpy(
    case: tuple[bytes, int, Rows, int], tag: bytes | None, checked_before: bool
) -> None:
    data, lo, rows, i = case
    if not len(rows.positions):
        return
    ours, theirs = Span.of(lo, data, "here"), Span.of(lo, data, "here")
    if checked_before:  # frames checked by an earlier step of the request
        _chunk(ours, TOPIC, rows, 0)
        numpy_chunk(theirs, TOPIC, rows, 0)
    got, want = _chunk(ours, TOPIC, rows, i), numpy_chunk(theirs, TOPIC, rows, i)
    assert ours.checked.tolist() == theirs.checked.tolist()
    assert (got is None) == (want is None)
    if got is None or want is None:
        return
    (chunk, error), (ref, ref_error) = got, want
    assert (error is None) == (ref_error is None)
    if error is not None and ref_error is not None:
        assert error.message == ref_error.message
        assert error.details == ref_error.details
    assert len(chunk) == len(ref) and chunk.first == ref.first
    assert chunk.fst.tolist() == ref.fst.tolist()
    assert chunk.fid.tolist() == ref.fid.tolist()
    for name in ("frame_size", "frame_count", "frame_ms", "topic_ok"):
        assert getattr(chunk, name).tolist() == getattr(ref, name).tolist(), name
    if not len(chunk):
        return
    batch, bad = _decode_chunk(chunk, rows, tag)
    ref_batch, ref_bad = numpy_decode_chunk(ref, rows, tag)
    assert bad == ref_bad
    same_batch(batch, ref_batch)


def test_frame_rows_stops_at_the_first_row_outside() -> None:
    data = bytes(200)
    positions = np.array([5, 100, 60, 152, 153, 10], dtype=np.int64)
    rel, fst, fid, heads = frame_rows(data, 0, positions, 1)
    assert rel.tolist() == [100, 60, 152]  # 153 + 48 passes the end
    assert fst.tolist() == [100 - FRAME_SIZE, 60 - FRAME_SIZE, 152 - FRAME_SIZE]
    assert fid.tolist() == [0, 1, 2] and heads.tolist() == [0, 1, 2]
    assert [len(a) for a in frame_rows(data, 1000, positions, 0)] == [0, 0, 0, 0]
    assert [len(a) for a in frame_rows(data, 0, positions, 6)] == [0, 0, 0, 0]


def test_gather_rows_wants_a_frame_and_offset_per_row() -> None:
    one = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="every row"):
        gather_rows(bytes(100), one, one, np.zeros(2, dtype=np.int64), one, one, one,
                    np.ones(1, dtype=np.uint8), one, 0, None)  # fmt: skip
