"""Compacted commit-log segment: LZ4 blocks of at most 64 KiB raw plus a block index.

Layout::

    header  : b"MSLZ" u16 version u16 codec (0 stored, 1 LZ4) u64 raw_size
    blocks  : LZ4 block-compressed (or stored) chunks, each ending on a record-frame boundary
    index   : per block (u64 raw_offset, u64 file_offset, u32 comp_len, u32 raw_len, u32 crc)
    footer  : u64 index_offset u32 block_count u32 raw_crc u32 index_crc b"MSLZ"

A random read decompresses exactly one block (a frame bigger than 64 KiB gets a block of its
own). ``raw_crc`` covers the original segment so a rewrite done elsewhere (a Spark executor)
can be proven identical before it replaces the original.
"""

from __future__ import annotations

import bisect
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable

import lz4.block
import numpy as np

from storage_node.errors import CorruptData
from storage_node.formats.record import PREFIX

MAGIC = b"MSLZ"
VERSION = 1
HEADER = struct.Struct("<4sHHQ")
CODEC_STORED = 0
CODEC_LZ4 = 1
FOOTER = struct.Struct("<QIII4s")
BLOCK_RAW_MAX = 64 * 1024  # the format's limit
BLOCK_RAW_TARGET = (
    16 * 1024
)  # what we write: a random read decompresses little, LZ4 still works well
INDEX_DTYPE = np.dtype(
    [
        ("raw_off", "<u8"),
        ("file_off", "<u8"),
        ("comp_len", "<u4"),
        ("raw_len", "<u4"),
        ("crc", "<u4"),
    ]
)


def _block_bounds(raw: bytes | memoryview) -> list[tuple[int, int]]:
    """Split ``raw`` into runs of whole frames of at most BLOCK_RAW_TARGET bytes."""
    bounds = []
    n = len(raw)
    start = off = 0
    unpack = PREFIX.unpack_from
    while off < n:
        if n - off < 8:
            raise CorruptData(f"segment ends inside a frame header at {off}")
        size = unpack(raw, off)[0]
        if size < 8 or off + size > n:
            raise CorruptData(f"segment has a bad frame length at {off}")
        if off > start and off + size - start > BLOCK_RAW_TARGET:
            bounds.append((start, off))
            start = off
        off += size
    if off > start:
        bounds.append((start, off))
    return bounds


def compact_segment_bytes(raw: bytes, compress: bool = True) -> bytes:
    """Rewrite a sealed segment's bytes into the block format (pure function).

    ``compress=False`` keeps blocks stored as-is (topics configured without compression)
    while still gaining the block index and checksums.
    """
    view = memoryview(raw)
    bounds = _block_bounds(view)
    index = np.zeros(len(bounds), dtype=INDEX_DTYPE)
    parts = [HEADER.pack(MAGIC, VERSION, CODEC_LZ4 if compress else CODEC_STORED, len(raw))]
    file_off = HEADER.size
    for i, (a, b) in enumerate(bounds):
        block = lz4.block.compress(view[a:b], store_size=False) if compress else bytes(view[a:b])
        index[i] = (a, file_off, len(block), b - a, zlib.crc32(block))
        parts.append(block)
        file_off += len(block)
    index_bytes = index.tobytes()
    parts.append(index_bytes)
    parts.append(
        FOOTER.pack(file_off, len(bounds), zlib.crc32(view), zlib.crc32(index_bytes), MAGIC)
    )
    return b"".join(parts)


def _parse_tail(size: int, read: Callable[[int, int], bytes]) -> tuple[np.ndarray, int, int, int]:
    """Read footer + block index; returns (index, raw_size, raw_crc, codec)."""
    if size < HEADER.size + FOOTER.size:
        raise CorruptData("compressed segment too short")
    magic, version, codec, raw_size = HEADER.unpack(read(0, HEADER.size))
    if magic != MAGIC or version != VERSION or codec not in (CODEC_STORED, CODEC_LZ4):
        raise CorruptData("compressed segment has a bad header")
    index_off, count, raw_crc, index_crc, magic2 = FOOTER.unpack(
        read(size - FOOTER.size, FOOTER.size)
    )
    if magic2 != MAGIC or index_off + count * INDEX_DTYPE.itemsize + FOOTER.size != size:
        raise CorruptData("compressed segment has a bad footer")
    index_bytes = read(index_off, count * INDEX_DTYPE.itemsize)
    if zlib.crc32(index_bytes) != index_crc:
        raise CorruptData("compressed segment block index checksum mismatch")
    return np.frombuffer(index_bytes, dtype=INDEX_DTYPE).copy(), raw_size, raw_crc, codec


def _unpack_block(block: bytes | memoryview, raw_len: int, codec: int) -> bytes:
    if codec == CODEC_STORED:
        return bytes(block)
    return lz4.block.decompress(block, uncompressed_size=raw_len)


def decompress_all(data: bytes) -> bytes:
    """Every raw byte back, checking each block and the whole-segment CRC."""
    index, raw_size, raw_crc, codec = _parse_tail(len(data), lambda o, n: data[o : o + n])
    view = memoryview(data)
    out = []
    for raw_off, file_off, comp_len, raw_len, crc in index.tolist():
        block = view[file_off : file_off + comp_len]
        if zlib.crc32(block) != crc:
            raise CorruptData(f"compressed block at raw offset {raw_off} checksum mismatch")
        out.append(_unpack_block(block, raw_len, codec))
    raw = b"".join(out)
    if len(raw) != raw_size or zlib.crc32(raw) != raw_crc:
        raise CorruptData("compressed segment does not reproduce its original bytes")
    return raw


def verify_compacted_segment(raw: bytes, compacted: bytes) -> None:
    """Raise CorruptData unless ``compacted`` decompresses to exactly ``raw``."""
    if decompress_all(compacted) != raw:
        raise CorruptData("compacted segment differs from the sealed original")


class CompressedSegmentReader:
    """Random record reads from a compressed segment through a ranged-read function.

    ``read(offset, length)`` may hit a local file (pread) or an object (ranged GET); the
    block index is read once, and a few decompressed blocks are cached.
    """

    CACHE_BLOCKS = 8

    def __init__(self, size: int, read: Callable[[int, int], bytes]) -> None:
        self._read = read
        self.stored_size = size
        self.index, self.raw_size, self.raw_crc, self.codec = _parse_tail(size, read)
        # plain lists: one scalar bisect and one tuple per read beat numpy's per-call overhead
        self._raw_offsets: list[int] = self.index["raw_off"].tolist()
        self._blocks: list[tuple[int, int, int, int, int]] = self.index.tolist()
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def block(self, i: int) -> bytes:
        with self._lock:
            hit = self._cache.get(i)
            if hit is not None:
                self._cache.move_to_end(i)
                return hit
        raw_off, file_off, comp_len, raw_len, crc = self._blocks[i]
        data = self._read(file_off, comp_len)
        if zlib.crc32(data) != crc:
            raise CorruptData(f"compressed block at raw offset {raw_off} checksum mismatch")
        raw = _unpack_block(data, raw_len, self.codec)
        with self._lock:
            self._cache[i] = raw
            if len(self._cache) > self.CACHE_BLOCKS:
                self._cache.popitem(last=False)
        return raw

    def read_at(self, rel: int) -> tuple[bytes, int]:
        """(block bytes, offset of ``rel`` inside them) for the record row at ``rel``."""
        if rel < 0 or rel >= self.raw_size:
            raise CorruptData(f"position {rel} outside compressed segment")
        i = bisect.bisect_right(self._raw_offsets, rel) - 1
        return self.block(i), rel - self._raw_offsets[i]

    def read_all(self) -> bytes:
        """The whole raw segment (every block checked and decompressed): recovery's replay."""
        return decompress_all(self._read(0, self.stored_size))
