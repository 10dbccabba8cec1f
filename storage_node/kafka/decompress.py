"""Decompressing a produced batch's records with a bound on what comes out.

A compressed batch is at most a request long, but its records may claim any size once
decompressed: a few kilobytes of zstd or gzip can say gigabytes (a decompression bomb).
Each codec here stops at MAX_DECOMPRESSED_BYTES and refuses the batch (MESSAGE_TOO_LARGE)
without holding more than that; a legitimate batch is far below it (a 1 MiB batch of logs
compressed 20x is 20 MiB). Formats as Kafka's clients write them: gzip (one or more
members), snappy (raw, or Xerial's framed blocks as the Java client writes), lz4 (the LZ4
frame format, KIP-57), zstd (frames).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam
from lz4 import frame as lz4_frame

from storage_node.errors import MessageTooLarge

MAX_DECOMPRESSED_BYTES = 64 << 20
_XERIAL = b"\x82SNAPPY\x00"  # the magic of Xerial's framing, then two int32 versions
_BLOCK = struct.Struct(">i")


def _too_large(limit: int) -> MessageTooLarge:
    return MessageTooLarge(f"the batch's records decompress to more than {limit} bytes")


def gunzip(data: bytes, limit: int) -> bytes:
    out = bytearray()
    while data:
        inflater = zlib.decompressobj(wbits=31)
        out += inflater.decompress(data, limit + 1 - len(out))
        if len(out) > limit:
            raise _too_large(limit)
        if not inflater.eof:
            raise ValueError("a gzip member ends early")
        data = inflater.unused_data
    return bytes(out)


def unsnappy(data: bytes, limit: int) -> bytes:
    if not data.startswith(_XERIAL) or len(data) < 16:
        if cramjam.snappy.decompress_raw_len(data) > limit:
            raise _too_large(limit)
        return bytes(cramjam.snappy.decompress_raw(data))
    view = memoryview(data)
    blocks = []
    total = 0
    at = 16
    while at < len(view):
        (size,) = _BLOCK.unpack_from(view, at)
        at += 4
        if size < 0 or at + size > len(view):
            raise ValueError("a snappy block runs past the batch")
        block = view[at : at + size]
        total += cramjam.snappy.decompress_raw_len(block)  # the block's header says
        if total > limit:
            raise _too_large(limit)
        blocks.append(bytes(cramjam.snappy.decompress_raw(block)))
        at += size
    return b"".join(blocks)


def unlz4(data: bytes, limit: int) -> bytes:
    decompressor = lz4_frame.LZ4FrameDecompressor()
    out = decompressor.decompress(data, max_length=limit + 1)
    if len(out) > limit:
        raise _too_large(limit)
    if not decompressor.eof:
        raise ValueError("the lz4 frame ends early")
    return bytes(out)


def unzstd(data: bytes, limit: int) -> bytes:
    """Into a buffer 8x the input (at least 1 MiB), 8x larger each time it is too small, up
    to ``limit`` (zstd frames need not say their size)."""
    size = min(limit, max(1 << 20, 8 * len(data)))
    while True:
        out = bytearray(size)
        try:
            n = cramjam.zstd.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise
            if size >= limit:
                raise _too_large(limit) from None
            size = min(limit, size * 8)
            continue
        del out[n:]
        return bytes(out)


CODECS: dict[int, Callable[[bytes, int], bytes]] = {1: gunzip, 2: unsnappy, 3: unlz4, 4: unzstd}
