"""Commit-log record frames: a batch of records as columns, one CRC per frame.

An appended batch is cut into frames of about ``FRAME_TARGET`` bytes of whole records (a
record bigger than that gets a frame of its own; records never straddle frames). A frame
stores its records column by column, like a Kafka record batch, so encoding a batch is a
few array operations and one ``join``, not work per record::

    header : u32 frame_len  u32 CRC-32C (of bytes 8..frame_len)
             u8 magic  u8 flags  u16 count  u8 topic_len  u8 producer_len  u16 reserved
             i64 store_ms  u64 sequence                                    (32 bytes)
    rows   : count x 48 bytes, one per record:
             u16 index  u16 partition  u8 flags  u8 msg_id_len  u16 key_len  u16 tag_len
             u16 headers_len  u64 queue_offset  i64 born_ms
             u32 key_off  u32 tag_off  u32 msg_id_off  u32 value_off  u32 value_len
    topic, producer id, then every key, every tag, every message ID, every value (each
    value followed by its record's headers when it has any)

Offsets count from the frame's first byte. A record's log position is the position of its
row; the row's ``index`` leads back to the frame header, so a read fetches one frame, checks
its CRC and decodes one row. Records stay self-describing (topic, partition, queue offset,
timestamps, key, tag, message ID, producer and sequence, value), so every index can be
rebuilt from the log alone. Headers (``headers.py``'s byte string) were added later
without a new magic: a row with ``ROW_HEADERS`` has ``headers_len`` bytes of them right
after its value (``value_len`` does not count them); frames written before have that flag
clear and that field 0, so they read as records without headers. ``flags`` of the last frame of a batch carries ``BATCH_END``:
recovery keeps whole batches only. The checksum is CRC-32C (Castagnoli, as in Kafka's record
batches and iSCSI), which the CPU computes in hardware several times faster than zlib's
CRC-32.

Checking and walking a run of frames (recovery's scan and replay, log shipping, copies) is
``frame_walker.py``'s job; this module is the layout, the encoder and one frame's decoder.
Over 400 lines on purpose: the layout and the only code that writes and reads it, together.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from crc32c import crc32c

from storage_node.errors import CorruptData
from storage_node.formats.packed import PackedColumn

MAGIC = 0xA8
FLAG_PRODUCER = 4  # frame flags
FLAG_BATCH_END = 8
ROW_KEY = 1  # row flags: a key / tag is present (an empty one is not a missing one)
ROW_TAG = 2
ROW_HEADERS = 4  # headers_len bytes of headers follow the value

FRAME = struct.Struct("<IIBBHBBHqQ")
FRAME_SIZE = FRAME.size  # 32
PREFIX = struct.Struct("<II")  # frame_len, crc: what a scanner reads first
FRAME_TAIL = struct.Struct("<BBHBBHqQ")  # the header after the CRC
ROW_DTYPE = np.dtype(
    [
        ("index", "<u2"), ("partition", "<u2"), ("flags", "u1"), ("idlen", "u1"),
        ("klen", "<u2"), ("taglen", "<u2"), ("hlen", "<u2"), ("qoff", "<u8"),
        ("born", "<i8"), ("koff", "<u4"), ("toff", "<u4"), ("ioff", "<u4"), ("voff", "<u4"),
        ("vlen", "<u4"),
    ]
)  # fmt: skip
ROW = ROW_DTYPE.itemsize  # 48
FRAME_DTYPE = np.dtype(
    [
        ("size", "<u4"), ("crc", "<u4"), ("magic", "u1"), ("flags", "u1"), ("count", "<u2"),
        ("tlen", "u1"), ("plen", "u1"), ("reserved", "<u2"), ("store_ms", "<i8"),
        ("sequence", "<u8"),
    ]
)  # fmt: skip
assert FRAME_DTYPE.itemsize == FRAME.size  # the frame header as an array record
ROW_STRUCT = struct.Struct("<HHBBHHHQqIIIII")
assert ROW_STRUCT.size == ROW
# One frame is what a single read fetches and checks: small frames keep point reads cheap,
# a few records per frame keep the per-frame work of large messages low.
FRAME_TARGET = 16 * 1024
FRAME_TARGET_MAX = 60 * 1024  # a frame stays inside one 64 KiB compressed block
FRAME_MIN_RECORDS = 16
MAX_FRAME_RECORDS = 0xFFFF
MAX_KEY_BYTES = 0xFFFF
MAX_TAG_BYTES = 0xFFFF
MAX_MSG_ID_BYTES = 0xFF
MAX_PRODUCER_BYTES = 0xFF
MAX_FRAME_BYTES = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded record; ``size`` is its share of the log (row plus its fields)."""

    topic: str
    partition: int
    queue_offset: int
    born_ms: int
    store_ms: int
    key: str | None
    tag: str | None
    msg_id: str
    value: bytes
    producer_id: str | None
    sequence: int | None
    size: int
    headers: bytes = b""  # headers.py's byte string; empty = none


# One piece of an encoded batch: the caller's own value objects, views into the columns, or
# the joined frames; each is written as it is (a gathering write).
Piece = bytes | bytearray | memoryview


@dataclass
class EncodedBatch:
    """A batch ready for the log: pieces to write in order, and where everything lands."""

    pieces: list[Piece]
    frame_sizes: np.ndarray  # int64, one per frame
    row_offsets: np.ndarray  # int64, each record's row position from the batch's first byte
    record_sizes: np.ndarray  # int64


def _present(column: PackedColumn, flag: int) -> int | np.ndarray:
    """``flag`` for each row whose entry is present: a constant when the column's length
    range says all or none are."""
    shortest, longest = column.length_range()
    if shortest >= 0:
        return flag
    if longest < 0:
        return 0
    return (column.lens >= 0).view(np.uint8) * flag


def encode_frames(
    topic: bytes,
    partitions: np.ndarray,
    queue_offsets: np.ndarray,
    born: np.ndarray | int,
    store_ms: int,
    keys: PackedColumn,
    tags: PackedColumn,
    msg_ids: PackedColumn,
    values: PackedColumn,
    producer: tuple[bytes, int] | None = None,
    target: int | None = None,
    batches: Sequence[tuple[int, tuple[bytes, int] | None]] | None = None,
    headers: PackedColumn | None = None,
) -> EncodedBatch:
    """Encode a batch given as packed columns; -1 lengths = absent key/tag.

    Everything per record is computed as arrays, the four variable-length columns (keys,
    tags, message IDs, values) together as one 4 x n matrix, so the fixed cost of a batch
    is a few dozen array operations; Python work is per frame (a few slices and the CRC).
    Values kept as parts (large ones) go to the pieces as they are: no copy before the write.

    ``batches`` lists (record count, producer) of several appended batches written together
    (group commit): frames never mix two of them, and each one's last frame is marked
    ``BATCH_END``. Without it the whole input is one batch of ``producer``. ``target`` (bytes
    per frame) defaults to FRAME_TARGET, raised up to FRAME_TARGET_MAX so that a frame holds
    FRAME_MIN_RECORDS records of the batch's average size.

    ``headers`` (one byte string per record, -1 or 0 bytes = none) are written after each
    record's value: the values column is then each value with its headers joined (a copy,
    for batches that carry headers only), and the rows say where the value ends.
    """
    n = len(partitions)
    hlens: np.ndarray | None = None
    if headers is not None and headers.length_range()[1] > 0:
        hlens = np.maximum(headers.lens, 0)
        vsizes = np.maximum(values.lens, 0)
        values = _with_headers(values, headers, vsizes, hlens)
    if batches is None:
        batches = [(n, producer)]
    vparts = values.parts
    # (the ufuncs' own methods: numpy's function wrappers cost microseconds per call, the
    # same order as the arithmetic on a batch of a hundred)
    lens = np.array((keys.lens, tags.lens, msg_ids.lens, values.lens), dtype=np.int64)
    flags = _present(keys, ROW_KEY) | _present(tags, ROW_TAG)
    np.maximum(lens, 0, out=lens)  # absent = no bytes
    rec_sizes = np.add.reduce(lens, axis=0)
    rec_sizes += ROW
    cum = np.zeros((4, n + 1), dtype=np.int64)  # running byte offsets per column
    np.add.accumulate(lens, axis=1, out=cum[:, 1:])
    total = int(np.add.reduce(cum[:, n])) + ROW * n
    if target is None:
        average = total // max(1, n)
        target = min(FRAME_TARGET_MAX, max(FRAME_TARGET, FRAME_MIN_RECORDS * average))
    # frames: cut where the running size crosses a multiple of the target, where a batch
    # starts, and after MAX_FRAME_RECORDS rows
    if len(batches) == 1 and n <= MAX_FRAME_RECORDS and total <= target:
        heads = np.zeros(1, dtype=np.int64)
        fid = np.zeros(n, dtype=np.intp)
        index_in_frame = np.arange(n, dtype=np.int64)
    else:
        bucket = (np.add.accumulate(rec_sizes) - rec_sizes) // max(1, target)
        first = np.empty(n, dtype=bool)
        first[0] = True
        np.not_equal(bucket[1:], bucket[:-1], out=first[1:])
        if len(batches) > 1:
            first[np.cumsum([count for count, _p in batches])[:-1]] = True
        heads = np.flatnonzero(first)
        if n > MAX_FRAME_RECORDS and int(np.diff(heads, append=n).max()) > MAX_FRAME_RECORDS:
            first[::MAX_FRAME_RECORDS] = True
            heads = np.flatnonzero(first)
        fid = np.add.accumulate(first, dtype=np.intp) - 1
        index_in_frame = np.arange(n, dtype=np.int64) - heads[fid]
    frames = len(heads)
    ends = np.empty(frames, dtype=np.int64)
    ends[:-1] = heads[1:]
    ends[-1] = n
    # which batch each frame belongs to, and the bytes that lead its columns
    leads = [topic + (p[0] if p is not None else b"") for _c, p in batches]
    if len(batches) == 1:
        frame_batch = [0] * frames
        lead_len: np.ndarray | int = len(leads[0])
    else:
        batch_ends = np.cumsum([count for count, _p in batches])
        frame_batch = np.searchsorted(batch_ends, heads, side="right").tolist()
        lead_len = np.array([len(leads[b]) for b in frame_batch], dtype=np.int64)
    # per frame: byte totals of each column, then where each column starts in the frame
    at_heads = cum[:, heads]
    at_ends = cum[:, ends]
    base = np.empty((4, frames), dtype=np.int64)
    base[0] = FRAME_SIZE + ROW * (ends - heads) + lead_len
    np.add.accumulate(at_ends[:3] - at_heads[:3], axis=0, out=base[1:])
    base[1:] += base[0]
    frame_sizes = base[3] + at_ends[3] - at_heads[3]
    if total > MAX_FRAME_BYTES and int(frame_sizes.max()) > MAX_FRAME_BYTES:
        raise ValueError("a record does not fit a frame (more than 4 GiB)")
    rows = np.zeros(n, dtype=ROW_DTYPE)
    rows["index"] = index_in_frame
    rows["partition"] = partitions
    rows["flags"] = flags
    rows["idlen"] = lens[2]
    rows["klen"] = lens[0]
    rows["taglen"] = lens[1]
    rows["qoff"] = queue_offsets
    rows["born"] = born
    # koff, toff, ioff, voff, vlen: the last five 32-bit words of every row
    words = rows.view(np.uint32).reshape(n, ROW // 4)
    words[:, 7:11] = ((base - at_heads)[:, fid] + cum[:, :n]).T
    words[:, 11] = lens[3]
    if hlens is not None:
        words[:, 11] -= hlens.astype(np.uint32)
        rows["hlen"] = hlens
        rows["flags"] |= (hlens > 0).view(np.uint8) * ROW_HEADERS
    row_bytes = memoryview(rows.tobytes())
    kmv, tmv, imv = memoryview(keys.blob), memoryview(tags.blob), memoryview(msg_ids.blob)
    vmv = memoryview(values.blob) if vparts is None else None
    kept_values: list[bytes] = vparts or []
    pieces: list[Piece] = []
    crc32 = crc32c
    table = np.concatenate((heads[None], ends[None], at_heads, at_ends, frame_sizes[None]))
    # small values: the frames are joined into one buffer and each CRC is computed over its
    # frame there (one call per frame); large values stay the caller's objects, written by a
    # gathering write, and each CRC is chained over the frame's pieces
    joined = vmv is not None
    for (a, b, k0, t0, i0, v0, k1, t1, i1, v1, size), owner, following in zip(
        table.T.tolist(), frame_batch, frame_batch[1:] + [-1], strict=True
    ):
        prod = batches[owner][1]
        tail = FRAME_TAIL.pack(
            MAGIC,
            (FLAG_PRODUCER if prod is not None else 0)
            | (FLAG_BATCH_END if following != owner else 0),
            b - a,
            len(topic),
            len(leads[owner]) - len(topic),
            0,
            store_ms,
            prod[1] if prod is not None else 0,
        )
        body: list[Piece] = [
            row_bytes[a * ROW : b * ROW],
            leads[owner],
            kmv[k0:k1],
            tmv[t0:t1],
            imv[i0:i1],
        ]
        if vmv is not None:
            pieces.append(PREFIX.pack(size, 0) + tail)
            pieces.extend(body)
            pieces.append(vmv[v0:v1])
            continue
        # everything before the values is small: one piece and one CRC call for it
        head = b"".join((tail, *body))
        crc = crc32(head)
        for value in kept_values[a:b]:
            crc = crc32(value, crc)
        pieces.append(PREFIX.pack(size, crc) + head)
        pieces.extend(kept_values[a:b])
    if frames == 1:
        row_offsets = index_in_frame * ROW + FRAME_SIZE
        frame_starts = [0]
    else:
        starts = np.add.accumulate(frame_sizes) - frame_sizes
        row_offsets = starts[fid] + FRAME_SIZE + ROW * index_in_frame
        frame_starts = starts.tolist()
    if joined:
        buf = bytearray().join(pieces)
        view = memoryview(buf)
        for start, size in zip(frame_starts, frame_sizes.tolist(), strict=True):
            PREFIX.pack_into(buf, start, size, crc32(view[start + 8 : start + size]))
        view.release()
        pieces = [buf]
    return EncodedBatch(pieces, frame_sizes, row_offsets, rec_sizes)


def _with_headers(
    values: PackedColumn, headers: PackedColumn, vsizes: np.ndarray, hlens: np.ndarray
) -> PackedColumn:
    """Each value followed by its record's headers, as one values column."""
    vends = np.cumsum(vsizes).tolist()
    hends = np.cumsum(hlens).tolist()
    vblob, hblob = memoryview(values.blob), memoryview(headers.blob)
    joined = [
        b"".join((vblob[v1 - vl : v1], hblob[h1 - hl : h1]))
        for v1, vl, h1, hl in zip(vends, vsizes.tolist(), hends, hlens.tolist(), strict=True)
    ]
    if values.parts is not None:
        return PackedColumn(None, vsizes + hlens, joined)
    return PackedColumn(b"".join(joined), vsizes + hlens)


# ---------------------------------------------------------------------------- reading


def check_frame(buf: bytes | memoryview, off: int, available: int) -> int:
    """Size of a whole, CRC-valid frame at ``off``, or -1 if it is torn or corrupt."""
    if available < FRAME_SIZE:
        return -1
    size, crc, magic, _flags, count, tlen, plen, _r, _ms, _seq = FRAME.unpack_from(buf, off)
    if magic != MAGIC or size > available or size < FRAME_SIZE + ROW * count + tlen + plen:
        return -1
    if count == 0 or crc32c(memoryview(buf)[off + 8 : off + size]) != crc:
        return -1
    return size


def frame_flags(buf: bytes | memoryview, off: int) -> int:
    return buf[off + 9]


def frame_offset_of_row(buf: bytes | memoryview, row_off: int) -> int:
    """Where the frame holding the row at ``row_off`` starts (from the row's index)."""
    return row_frame_start(buf[row_off : row_off + 2], row_off)


def verified_frame(buf: bytes | memoryview, off: int, where: str = "") -> memoryview:
    """The frame at ``off`` after its checks; CorruptData naming ``where`` if they fail."""
    if off < 0 or len(buf) - off < FRAME_SIZE:
        raise CorruptData(f"truncated record frame {where}".strip())
    size = check_frame(buf, off, len(buf) - off)
    if size < 0:
        raise CorruptData(f"record frame checksum or header mismatch {where}".strip())
    return memoryview(buf)[off : off + size]


def decode_row(frame: memoryview, row_off: int, with_value: bool = True) -> Record:
    """Decode the record whose row starts at ``row_off`` of a verified ``frame``."""
    _size, _crc, _m, flags, count, tlen, plen, _r, store_ms, sequence = FRAME.unpack_from(frame)
    if row_off < FRAME_SIZE or row_off > FRAME_SIZE + ROW * (count - 1):
        raise CorruptData(f"no record row at offset {row_off} of its frame")
    (index, part, rflags, idlen, klen, taglen, hlen, qoff, born, koff, toff, ioff, voff, vlen) = (
        ROW_STRUCT.unpack_from(frame, row_off)
    )
    if not rflags & ROW_HEADERS:
        hlen = 0
    if (row_off - FRAME_SIZE) != ROW * index or voff + vlen + hlen > len(frame):
        raise CorruptData("record row does not match its frame")
    lead = FRAME_SIZE + ROW * count
    topic = bytes(frame[lead : lead + tlen]).decode()
    producer_id = None
    seq = None
    if flags & FLAG_PRODUCER:
        producer_id = bytes(frame[lead + tlen : lead + tlen + plen]).decode()
        seq = sequence
    return Record(
        topic,
        part,
        qoff,
        born,
        store_ms,
        bytes(frame[koff : koff + klen]).decode() if rflags & ROW_KEY else None,
        bytes(frame[toff : toff + taglen]).decode() if rflags & ROW_TAG else None,
        bytes(frame[ioff : ioff + idlen]).decode(),
        bytes(frame[voff : voff + vlen]) if with_value else b"",
        producer_id,
        seq,
        ROW + klen + taglen + idlen + vlen + hlen,
        bytes(frame[voff + vlen : voff + vlen + hlen]),
    )


def decode_frame(
    buf: bytes | memoryview, off: int = 0, with_value: bool = True, where: str = ""
) -> list[tuple[int, Record]]:
    """Every record of the frame at ``off`` as (row offset from ``off``, record)."""
    frame = verified_frame(buf, off, where)
    count = FRAME.unpack_from(frame)[4]
    return [
        (row, decode_row(frame, row, with_value))
        for row in range(FRAME_SIZE, FRAME_SIZE + ROW * count, ROW)
    ]


def read_record(buf: bytes | memoryview, row_off: int, where: str = "") -> Record:
    """The record whose row is at ``row_off`` in ``buf`` (which holds its whole frame)."""
    off = frame_offset_of_row(buf, row_off)
    frame = verified_frame(buf, off, where)
    return decode_row(frame, row_off - off)


def frame_length(buf: bytes | memoryview, off: int = 0) -> int:
    """The length a frame header at ``off`` claims (unchecked)."""
    return int.from_bytes(buf[off : off + 4], "little")


def row_frame_start(row_index: bytes | memoryview, row_off: int) -> int:
    """Where the frame of the row at ``row_off`` starts, given the row's first two bytes."""
    return row_off - FRAME_SIZE - ROW * int.from_bytes(row_index[:2], "little")
