"""Record headers: a message's list of (name, value) pairs as one byte string.

Kafka records carry headers (names are text, values bytes or null; order kept, a name may
repeat), and msgstore stores them byte for byte so that what a producer sent is what every
reader gets back. One message's headers are one byte string, the same in a commit-log frame
(``record.py``: after the record's value), in the binary wire formats and in the packed
``headers`` column of a batch::

    per header, in order:  u16 name_len  name (UTF-8)  i32 value_len (-1 = null)  value

little-endian; no headers is the empty string. The encoded form of one message is at most
``MAX_HEADER_BYTES`` (its length is a 16-bit field of the frame's row).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from storage_node.errors import InvalidBatch

MAX_HEADER_BYTES = 0xFFFF
_NAME = struct.Struct("<H")
_VALUE = struct.Struct("<i")

Header = tuple[str, bytes | None]
Headers = tuple[Header, ...]


def encode_headers(headers: Sequence[tuple[str | bytes, bytes | None]]) -> bytes:
    """The byte string of a message's headers (names given as str or UTF-8 bytes);
    InvalidBatch for a wrong type, a name that is not UTF-8, or more than
    MAX_HEADER_BYTES in all."""
    out = bytearray()
    for item in headers:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise InvalidBatch("a header is a (name, value) pair")
        name, value = item
        if not isinstance(name, str | bytes):
            raise InvalidBatch("a header name must be a string")
        try:
            raw = name.encode("utf-8") if isinstance(name, str) else name
            raw.decode("utf-8")
        except UnicodeError:
            raise InvalidBatch("a header name is not valid UTF-8") from None
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise InvalidBatch(f"the value of header {raw.decode()!r} must be bytes or None")
        if len(raw) > MAX_HEADER_BYTES:
            raise InvalidBatch(f"headers longer than {MAX_HEADER_BYTES} bytes")
        out += _NAME.pack(len(raw))
        out += raw
        if value is None:
            out += _VALUE.pack(-1)
        else:
            out += _VALUE.pack(len(value))
            out += value
        if len(out) > MAX_HEADER_BYTES:
            raise InvalidBatch(f"headers longer than {MAX_HEADER_BYTES} bytes (encoded)")
    return bytes(out)


def decode_headers(raw: bytes | memoryview) -> Headers:
    """A message's headers from their byte string; ValueError when it does not parse."""
    data = bytes(raw)
    out: list[Header] = []
    pos, end = 0, len(data)
    while pos < end:
        if pos + 2 > end:
            raise ValueError("headers cut inside a name length")
        (nlen,) = _NAME.unpack_from(data, pos)
        pos += 2
        if pos + nlen + 4 > end:
            raise ValueError("headers cut inside a name")
        name = data[pos : pos + nlen].decode("utf-8")
        pos += nlen
        (vlen,) = _VALUE.unpack_from(data, pos)
        pos += 4
        if vlen < -1 or pos + max(vlen, 0) > end:
            raise ValueError("headers cut inside a value")
        out.append((name, None if vlen < 0 else data[pos : pos + vlen]))
        pos += max(vlen, 0)
    return tuple(out)


def check_headers_column(blob: bytes | bytearray | memoryview, lens: np.ndarray) -> None:
    """Every entry of a packed headers column parses and fits a frame; InvalidBatch naming
    the first message that does not (entries of -1 or 0 bytes are no headers)."""
    sizes = np.maximum(lens, 0)
    if len(sizes) and int(sizes.max()) > MAX_HEADER_BYTES:
        i = int(np.flatnonzero(sizes > MAX_HEADER_BYTES)[0])
        raise InvalidBatch(f"message {i}: headers longer than {MAX_HEADER_BYTES} bytes", index=i)
    if int(sizes.sum()) != len(blob):
        raise InvalidBatch(f"header bytes ({len(blob)}) do not add up to {int(sizes.sum())}")
    view = memoryview(blob)
    start = 0
    for i, size in enumerate(sizes.tolist()):
        if size:
            try:
                decode_headers(view[start : start + size])
            except (ValueError, UnicodeDecodeError) as exc:
                raise InvalidBatch(f"message {i}: malformed headers ({exc})", index=i) from None
        start += size


def headers_list(blob: bytes | bytearray | memoryview, lens: np.ndarray) -> list[Headers]:
    """Every message's headers of a packed headers column (``()`` for none)."""
    out: list[Headers] = []
    view = memoryview(blob)
    start = 0
    for size in np.maximum(lens, 0).tolist():
        out.append(decode_headers(view[start : start + size]) if size else ())
        start += size
    return out
