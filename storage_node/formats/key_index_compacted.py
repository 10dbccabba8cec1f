"""Compacted key index: hash chains rewritten into slot-contiguous arrays (seed 001).

Layout::

    header : b"MKIC" u32 version u32 slot_count u32 count i64 begin_ms i64 end_ms
             i64 begin_pos i64 end_pos                                   (48 B)
    slots  : slot_count x (u32 first_item, u32 item_count)
    items  : count x (u32 key_hash, u64 log_position, u32 time_delta_s), grouped by slot,
             newest first inside a slot
    footer : u32 crc32 of everything before it, b"MKIC"

A lookup reads one slot entry and then one contiguous run of items: two reads, which is
what matters once the file lives in an object store. The slot count is chosen from the
number of items (the full hash is kept, so slots can be re-derived), which keeps small
files small.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator

import numpy as np

from storage_node.errors import CorruptData
from storage_node.formats import key_index_file as unsealed

MAGIC = b"MKIC"
VERSION = 1
HEADER = struct.Struct("<4sIIIqqqq")
SLOT = struct.Struct("<II")
ITEM = struct.Struct("<IQI")
FOOTER = struct.Struct("<I4s")
ITEM_DTYPE = np.dtype([("hash", "<u4"), ("pos", "<u8"), ("tsec", "<u4")])
SLOT_DTYPE = np.dtype([("first", "<u4"), ("count", "<u4")])


def _parse_unsealed(raw: bytes) -> tuple[tuple, np.ndarray]:
    """Header fields and the used items (numbered 1..count-1) of an unsealed IndexFile image."""
    if len(raw) < unsealed.HEADER.size + unsealed.TRAILER.size:
        raise CorruptData("key index image too short")
    magic, version, slots, capacity = unsealed.TRAILER.unpack_from(
        raw, len(raw) - unsealed.TRAILER.size
    )
    if magic != unsealed.MAGIC or version != unsealed.VERSION:
        raise CorruptData("key index image has a bad trailer")
    header = unsealed.HEADER.unpack_from(raw, 0)
    count = header[5]
    base = unsealed.HEADER.size + 4 * slots
    need = base + count * unsealed.ITEM.size + unsealed.TRAILER.size
    if count < 1 or count > capacity or len(raw) < need:
        raise CorruptData("key index image is truncated")
    items = np.frombuffer(raw, dtype=unsealed.ITEM_DTYPE, count=count, offset=base)[1:]
    return header, items


def _slot_count(n: int) -> int:
    return max(16, 1 << max(0, int(n - 1).bit_length()))


def compact_key_index_bytes(raw: bytes) -> bytes:
    """Rewrite a sealed IndexFile image (full or trimmed) into the compacted form."""
    (begin_ms, end_ms, begin_pos, end_pos, _used, _count), items = _parse_unsealed(raw)
    n = len(items)
    slots = _slot_count(n)
    slot_of = items["hash"].astype(np.int64) % slots
    numbers = np.arange(n, dtype=np.int64)
    order = np.lexsort((-numbers, slot_of))  # by slot, newest first within a slot
    out = np.empty(n, dtype=ITEM_DTYPE)
    picked = items[order]
    out["hash"] = picked["hash"]
    out["pos"] = picked["pos"]
    out["tsec"] = picked["tsec"]
    counts = np.bincount(slot_of, minlength=slots).astype("<u4")
    table = np.empty(slots, dtype=SLOT_DTYPE)
    table["count"] = counts
    table["first"] = np.concatenate(([0], np.cumsum(counts)[:-1])).astype("<u4")
    body = b"".join(
        (
            HEADER.pack(MAGIC, VERSION, slots, n, begin_ms, end_ms, begin_pos, end_pos),
            table.tobytes(),
            out.tobytes(),
        )
    )
    return body + FOOTER.pack(zlib.crc32(body), MAGIC)


def _digest(hashes: np.ndarray, positions: np.ndarray) -> tuple[int, int]:
    """Order-independent fingerprint of a set of (hash, position) items."""
    mixed = positions.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ hashes.astype(np.uint64)
    if not len(mixed):
        return (0, 0)
    return (int(np.bitwise_xor.reduce(mixed)), int(mixed.sum(dtype=np.uint64)))


def verify_compacted_key_index(raw: bytes, compacted: bytes) -> None:
    """Raise CorruptData unless ``compacted`` holds exactly the items of ``raw``, well grouped."""
    header, items = _parse_unsealed(raw)
    reader = CompactedKeyIndex(len(compacted), lambda o, n: compacted[o : o + n], check=True)
    if reader.count != len(items) or reader.begin_ms != header[0]:
        raise CorruptData("compacted key index does not match the sealed original")
    table = np.frombuffer(compacted, dtype=SLOT_DTYPE, count=reader.slot_count, offset=HEADER.size)
    got = np.frombuffer(compacted, dtype=ITEM_DTYPE, count=reader.count, offset=reader.items_base)
    if int(table["count"].sum(dtype=np.int64)) != reader.count:
        raise CorruptData("compacted key index slot counts do not add up")
    owner = np.repeat(np.arange(reader.slot_count), table["count"].astype(np.int64))
    if len(owner) and not np.array_equal(got["hash"].astype(np.int64) % reader.slot_count, owner):
        raise CorruptData("compacted key index has items in the wrong slot")
    same_slot = owner[1:] == owner[:-1]
    if np.any(got["pos"][1:][same_slot] > got["pos"][:-1][same_slot]):
        raise CorruptData("compacted key index slot is not newest first")
    if _digest(items["hash"], items["pos"]) != _digest(
        got["hash"], got["pos"]
    ) or not np.array_equal(np.sort(items["pos"]), np.sort(got["pos"])):
        raise CorruptData("compacted key index items differ from the sealed original")


class CompactedKeyIndex:
    """Lookups over a compacted key index through a ranged-read function (file or object)."""

    def __init__(self, size: int, read: Callable[[int, int], bytes], check: bool = False) -> None:
        if size < HEADER.size + FOOTER.size:
            raise CorruptData("compacted key index too short")
        self._read = read
        self.stored_size = size
        (
            magic,
            version,
            self.slot_count,
            self.count,
            self.begin_ms,
            self.end_ms,
            self.begin_pos,
            self.end_pos,
        ) = HEADER.unpack(read(0, HEADER.size))
        if magic != MAGIC or version != VERSION:
            raise CorruptData("compacted key index has a bad header")
        self.items_base = HEADER.size + SLOT.size * self.slot_count
        if self.items_base + ITEM_DTYPE.itemsize * self.count + FOOTER.size != size:
            raise CorruptData("compacted key index has a bad size")
        if check:
            body = read(0, size - FOOTER.size)
            crc, magic2 = FOOTER.unpack(read(size - FOOTER.size, FOOTER.size))
            if magic2 != MAGIC or zlib.crc32(body) != crc:
                raise CorruptData("compacted key index checksum mismatch")

    def candidates(self, khash: int, begin_ms: int, end_ms: int) -> Iterator[int]:
        """Positions with this hash whose time may lie in range, newest first (two reads)."""
        first, n = SLOT.unpack(
            self._read(HEADER.size + SLOT.size * (khash % self.slot_count), SLOT.size)
        )
        if n == 0:
            return
        data = self._read(self.items_base + first * 16, n * 16)
        if n <= 32:  # the usual case: a few items; plain struct beats numpy's call overhead
            begin = self.begin_ms
            for h, pos, tsec in ITEM.iter_unpack(data):
                t = begin + tsec * 1000
                if h == khash and t <= end_ms and t + 999 >= begin_ms:
                    yield pos
            return
        run = np.frombuffer(data, dtype=ITEM_DTYPE)
        t = self.begin_ms + run["tsec"].astype(np.int64) * 1000
        keep = (run["hash"] == khash) & (t <= end_ms) & (t + 999 >= begin_ms)
        yield from run["pos"][keep].tolist()
