"""Commit-log record codec.

A record is self-describing so every index can be rebuilt from the log alone::

    u32 length (whole record)  u32 crc32 (of the whole record, this field counted as zeros)
    u8 magic  u8 flags  u8 topic_len  u16 partition  u64 queue_offset
    i64 born_ms  i64 store_ms  u16 key_len  u16 tag_len  u8 msg_id_len  u32 value_len
    [flags & PRODUCER: u8 producer_len, producer, u64 sequence]
    topic, key, tag, msg_id, value

``flags`` tells a missing key/tag (None) from an empty one and marks the last record of
each appended batch, so recovery can drop a batch that a crash cut in half. Batches are encoded with one
``bytes.join`` so the per-message Python work stays small.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, repeat
from operator import is_not

import numpy as np

from storage_node.errors import CorruptData

MAGIC = 0xA7
FLAG_KEY = 1
FLAG_TAG = 2
FLAG_PRODUCER = 4
FLAG_BATCH_END = 8  # last record of an appended batch: recovery keeps whole batches only

PREFIX = struct.Struct("<II")
BODY_HEADER = struct.Struct("<BBBHQqqHHBI")
HEADER_SIZE = PREFIX.size + BODY_HEADER.size  # 46
PRODUCER_TAIL = struct.Struct("<Q")
MAX_KEY_BYTES = 0xFFFF
MAX_TAG_BYTES = 0xFFFF
MAX_MSG_ID_BYTES = 0xFF
MAX_TOPIC_BYTES = 0xFF


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded record; ``size`` is its length in the log."""

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


HEADER_DTYPE = np.dtype(
    [
        ("size", "<u4"), ("crc", "<u4"), ("magic", "u1"), ("flags", "u1"), ("tlen", "u1"),
        ("partition", "<u2"), ("qoff", "<u8"), ("born", "<i8"), ("store", "<i8"),
        ("klen", "<u2"), ("taglen", "<u2"), ("idlen", "u1"), ("vlen", "<u4"),
    ]
)  # fmt: skip
assert HEADER_DTYPE.itemsize == HEADER_SIZE


@lru_cache(maxsize=256)
def _header_dtype(mid_len: int, widths: tuple[int, ...] = ()) -> np.dtype:
    """Header, producer/topic bytes, then fixed-width leading fields ``f0``, ``f1``, ..."""
    extra = [(f"f{i}", f"S{w}") for i, w in enumerate(widths)]
    return np.dtype(HEADER_DTYPE.descr + [("mid", "u1", (mid_len,))] + extra)


def _lengths(items: list[bytes], n: int) -> np.ndarray:
    return np.fromiter(map(len, items), dtype=np.int64, count=n)


def _present(items: list[bytes | None], n: int) -> np.ndarray:
    """1 where an optional field is given, 0 where it is None (C-level, no generator)."""
    if items.count(None) == 0:
        return np.ones(n, dtype=np.uint8)
    return np.fromiter(map(is_not, items, repeat(None)), dtype=np.uint8, count=n)


def _ends(step: int, n: int) -> range:
    return range(step, n * step + step, step)


def encode_batch(
    topic: bytes,
    partitions: list[int] | np.ndarray,
    queue_offsets: list[int] | np.ndarray,
    born: list[int] | np.ndarray,
    store_ms: int,
    keys: list[bytes | None],
    tags: list[bytes | None],
    msg_ids: list[bytes],
    values: list[bytes],
    producer: tuple[bytes, int] | None = None,
    join: bool = True,
) -> tuple[bytearray | list[bytes], np.ndarray]:
    """Encode a batch into one contiguous buffer; returns it and each record's size.

    Headers are built as one numpy array, the buffer with a single ``join`` (one copy of
    the values), and the CRCs are computed over the final buffer and patched in, so the
    per-message Python work is one slice. CRCs are chained over the record's pieces with
    C-level ``map`` calls (the CRC field counts as zeros), then patched into the buffer.

    With ``join=False`` the records come back as a list of pieces (header, fields, value
    bytes as given) for a gathering write: large values are then never copied in Python.
    """
    n = len(values)
    mid = topic
    flags = 0
    if producer is not None:
        mid = bytes((len(producer[0]),)) + producer[0] + PRODUCER_TAIL.pack(producer[1]) + topic
        flags = FLAG_PRODUCER
    vlen = _lengths(values, n)
    flag_arr = np.full(n, flags, dtype=np.uint8)
    # the optional fields in record order: (header length field, bytes, lengths)
    fields: list[tuple[str, list[bytes], np.ndarray]] = []
    for name, items, flag in (("klen", keys, FLAG_KEY), ("taglen", tags, FLAG_TAG)):
        if items.count(None) != n:
            parts = [b"" if x is None else x for x in items] if None in items else items
            fields.append((name, parts, _lengths(parts, n)))  # type: ignore[arg-type]
            flag_arr |= _present(items, n) * np.uint8(flag)
    fields.append(("idlen", msg_ids, _lengths(msg_ids, n)))
    # Leading fields of one width for the whole batch (fixed-format keys, node-assigned
    # IDs) ride in the header array like the constant producer/topic bytes: fewer pieces
    # per record to join and to checksum.
    widths: list[int] = []
    for _name, _parts, lens in fields:
        if int(lens[0]) == 0 or int(lens.min()) != int(lens.max()):
            break
        widths.append(int(lens[0]))
    hdr = np.zeros(n, dtype=_header_dtype(len(mid), tuple(widths)))
    hdr["mid"] = np.frombuffer(mid, dtype=np.uint8)
    hdr["magic"] = MAGIC
    hdr["tlen"] = len(topic)
    hdr["partition"] = partitions
    hdr["qoff"] = queue_offsets
    hdr["born"] = born
    hdr["store"] = store_ms
    size = vlen + (HEADER_SIZE + len(mid))
    columns: list = [None]  # header slices go first
    for i, (name, parts, lens) in enumerate(fields):
        hdr[name] = lens
        size += lens
        if i < len(widths):
            hdr[f"f{i}"] = parts
        else:
            columns.append(parts)
    flag_arr[-1] |= FLAG_BATCH_END
    hdr["flags"] = flag_arr
    hdr["vlen"] = vlen
    hdr["size"] = size
    head = hdr.tobytes()
    step = hdr.dtype.itemsize
    heads = list(map(head.__getitem__, map(slice, range(0, n * step, step), _ends(step, n))))
    columns[0] = heads
    columns.append(values)
    crc32 = zlib.crc32
    chained = map(crc32, heads)
    for column in columns[1:]:
        chained = map(crc32, column, chained)
    crcs = np.fromiter(chained, dtype="<u4", count=n)
    if not join:
        hdr["crc"] = crcs
        head = hdr.tobytes()
        columns[0] = list(
            map(head.__getitem__, map(slice, range(0, n * step, step), _ends(step, n)))
        )
        return list(chain.from_iterable(zip(*columns, strict=True))), size
    buf = bytearray().join(chain.from_iterable(zip(*columns, strict=True)))
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(size[:-1], out=starts[1:])
    raw = np.frombuffer(buf, dtype=np.uint8)
    raw[(starts[:, None] + np.arange(4, 8)).ravel()] = crcs.view(np.uint8)
    del raw
    return buf, size


_ZERO_CRC = bytes(4)


def record_crc(view: bytes | memoryview, off: int, size: int) -> int:
    """CRC of the record at ``off`` with its CRC field counted as zeros."""
    return zlib.crc32(
        view[off + 8 : off + size], zlib.crc32(_ZERO_CRC, zlib.crc32(view[off : off + 4]))
    )


def record_size_at(buf: bytes | memoryview, off: int) -> int:
    """The length field of the record starting at ``off``."""
    return PREFIX.unpack_from(buf, off)[0]


def check_record(buf: bytes | memoryview, off: int, available: int) -> int:
    """Size of a whole, CRC-valid record at ``off``, or -1 if it is torn or corrupt."""
    if available < HEADER_SIZE:
        return -1
    size, crc = PREFIX.unpack_from(buf, off)
    if size < HEADER_SIZE or size > available:
        return -1
    if buf[off + 8] != MAGIC:
        return -1
    if record_crc(memoryview(buf), off, size) != crc:
        return -1
    return size


def decode_record(
    buf: bytes | memoryview, off: int = 0, where: str = "", with_value: bool = True
) -> Record:
    """Decode and CRC-check the record at ``off``; CorruptData if it fails."""
    view = memoryview(buf)
    if len(view) - off < HEADER_SIZE:
        raise CorruptData(f"truncated record header {where}".strip())
    size, crc = PREFIX.unpack_from(view, off)
    if size < HEADER_SIZE or off + size > len(view):
        raise CorruptData(f"bad record length {size} {where}".strip())
    if record_crc(view, off, size) != crc:
        raise CorruptData(f"record checksum mismatch {where}".strip())
    (magic, flags, tlen, part, qoff, born, stored, klen, taglen, idlen, vlen) = (
        BODY_HEADER.unpack_from(view, off + 8)
    )
    if magic != MAGIC:
        raise CorruptData(f"bad record magic {where}".strip())
    p = off + HEADER_SIZE
    producer_id = None
    sequence = None
    if flags & FLAG_PRODUCER:
        plen = view[p]
        producer_id = bytes(view[p + 1 : p + 1 + plen]).decode()
        sequence = PRODUCER_TAIL.unpack_from(view, p + 1 + plen)[0]
        p += 1 + plen + 8
    topic = bytes(view[p : p + tlen]).decode()
    p += tlen
    key = bytes(view[p : p + klen]).decode() if flags & FLAG_KEY else None
    p += klen
    tag = bytes(view[p : p + taglen]).decode() if flags & FLAG_TAG else None
    p += taglen
    msg_id = bytes(view[p : p + idlen]).decode()
    p += idlen
    value = bytes(view[p : p + vlen]) if with_value else b""
    if p + vlen != off + size:
        raise CorruptData(f"record fields do not add up {where}".strip())
    return Record(
        topic, part, qoff, born, stored, key, tag, msg_id, value, producer_id, sequence, size
    )


def iter_valid_records(buf: bytes | memoryview, start: int = 0, end: int | None = None):  # noqa: ANN201
    """Yield ``(offset, size)`` of consecutive valid records; stops at the first bad one.

    The caller learns where the valid prefix ends from the last yielded record.
    """
    end = len(buf) if end is None else end
    off = start
    while off < end:
        size = check_record(buf, off, end - off)
        if size < 0:
            return
        yield off, size
        off += size
