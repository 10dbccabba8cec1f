"""Message IDs ``app-iphex-hour-seq`` and their two-level index (seed 000, CAT).

An index file exists per app and hour (``msgid/<yyyyMMddHH>/<app>``). It is a sequence of
units of 4096 segments x 4096 eight-byte entries (128 MiB, sparse). Segment 0 of a unit is
the header: entry 0 holds a magic, entry j (1..4095) holds ``ip << 32 | (seq // 4096 + 1)``
and says which (IP, base index) segment j stores. Other segments hold one address per
sequence number (``seq % 4096``): the commit-log position + 1 (0 = empty). A lookup is a
dictionary probe on the loaded headers and one 8-byte read; many producer IPs share a file.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, overload

import numpy as np

from storage_node.backend.files import ensure_dir, pread_exact, pwrite_all
from storage_node.errors import InvalidArgument
from storage_node.formats.names import is_valid_name
from storage_node.formats.packed import PackedColumn, filled

SEGMENT_ENTRIES = 4096
ENTRY = struct.Struct("<Q")
SEGMENT_BYTES = SEGMENT_ENTRIES * 8
UNIT_BYTES = SEGMENT_ENTRIES * SEGMENT_BYTES
HEADER_MAGIC = 0x4D5347494458_0001  # "MSGIDX", version 1
MS_PER_HOUR = 3_600_000
MAX_SEQ = (2**32 - 2) * SEGMENT_ENTRIES


@dataclass(frozen=True, slots=True)
class MessageId:
    app: str
    ip: int
    hour: int
    seq: int

    def __str__(self) -> str:
        return format_msg_id(self.app, self.ip, self.hour, self.seq)


def ip_to_int(ip: str) -> int:
    try:
        return int.from_bytes(socket.inet_aton(ip), "big")
    except OSError as exc:
        raise InvalidArgument(f"invalid IPv4 address {ip!r}") from exc


def format_msg_id(app: str, ip: int, hour: int, seq: int) -> str:
    return f"{app}-{ip:08x}-{hour}-{seq}"


def numbered_ids(prefix: bytes, first_seq: int, n: int) -> PackedColumn:
    """IDs ``prefix + str(seq)`` for seq in first_seq..first_seq+n-1, built as one digit
    matrix per decimal width instead of one string format per message."""
    if n <= 0:
        return PackedColumn(b"", np.zeros(0, dtype=np.int64))
    low, high = len(str(first_seq)), len(str(first_seq + n - 1))
    seqs = np.arange(first_seq, first_seq + n, dtype=np.int64)
    if low == high:  # the usual case: one width for the whole run
        size = len(prefix) + low
        lens = filled(n, size)
        return PackedColumn(_digit_rows(prefix, seqs, low), lens, length_range=(size, size))
    cuts = [0, *(10**w - first_seq for w in range(low, high)), n]
    blob = b"".join(
        _digit_rows(prefix, seqs[a:b], w)
        for w, a, b in zip(range(low, high + 1), cuts[:-1], cuts[1:], strict=True)
    )
    lens = np.repeat(np.arange(low, high + 1, dtype=np.int64) + len(prefix), np.diff(cuts))
    return PackedColumn(blob, lens)


def _digit_rows(prefix: bytes, seqs: np.ndarray, width: int) -> bytes:
    """``prefix`` and the ``width`` decimal digits of each number, one row per number."""
    rows = _row_template(prefix, width).repeat(len(seqs), axis=0)
    digits = seqs[:, None] // _DIVISORS[width]
    digits %= 10
    tail = rows[:, len(prefix) :]
    np.add(tail, digits, out=tail, casting="unsafe")  # ASCII "0" + digit, each < 10
    return rows.tobytes()


@lru_cache(maxsize=256)
def _row_template(prefix: bytes, width: int) -> np.ndarray:
    """One row: the prefix, then ``width`` ASCII zeros (a node writes a few prefixes an hour)."""
    return np.frombuffer(prefix + b"0" * width, dtype=np.uint8).reshape(1, -1)


_DIVISORS = [10 ** np.arange(w - 1, -1, -1, dtype=np.int64) for w in range(20)]


def valid_app(app: str) -> bool:
    return is_valid_name(app)


def parse_msg_id(text: str) -> MessageId:
    """Split and validate an ID; InvalidArgument names what is wrong."""
    if not isinstance(text, str) or len(text) > 255:
        raise InvalidArgument("message ID must be a string of at most 255 characters")
    parts = text.rsplit("-", 3)
    if len(parts) != 4:
        raise InvalidArgument(f"malformed message ID {text!r}: expected app-iphex-hour-seq")
    app, iphex, hour, seq = parts
    if not valid_app(app):
        raise InvalidArgument(f"malformed message ID {text!r}: bad app name")
    if len(iphex) != 8 or not all(c in "0123456789abcdefABCDEF" for c in iphex):
        raise InvalidArgument(f"malformed message ID {text!r}: IP must be 8 hex digits")
    if not (hour.isdigit() and len(hour) <= 9 and seq.isdigit() and len(seq) <= 15):
        raise InvalidArgument(f"malformed message ID {text!r}: hour and seq must be decimal")
    if int(seq) > MAX_SEQ:
        raise InvalidArgument(f"malformed message ID {text!r}: sequence too large")
    return MessageId(app, int(iphex, 16), int(hour), int(seq))


def parse_canonical_msg_id(text: str) -> MessageId:
    """``parse_msg_id`` that also refuses spellings of an ID other than its one canonical
    form (upper-case hex, leading zeros): two spellings would share one index slot."""
    mid = parse_msg_id(text)
    if str(mid) != text:
        raise InvalidArgument(
            f"message ID {text!r} is not in canonical form: write it as {str(mid)!r}"
        )
    return mid


class MsgIdIndexFile:
    """The two-level index of one app and hour. Writes are serialised by the store.

    Addresses are written as soon as they are known (not collected in memory as the queue
    index's entries are): the page cache outlives a crash of the process, so the IDs of a
    frame that recovery cannot read back (damaged) still lead to it and to its damage
    report, where a replay could not rebuild them.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        ensure_dir(os.path.dirname(path))
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self._segments: dict[int, int] = {}  # ip << 32 | base+1 -> absolute byte offset
        self._units = os.fstat(self._fd).st_size // UNIT_BYTES
        self._next_slot = 1
        for unit in range(self._units):
            header = np.frombuffer(
                pread_exact(self._fd, SEGMENT_BYTES, unit * UNIT_BYTES), dtype="<u8"
            )
            for j in np.flatnonzero(header[1:]).tolist():
                self._segments[int(header[j + 1])] = unit * UNIT_BYTES + (j + 1) * SEGMENT_BYTES
                self._next_slot = unit * SEGMENT_ENTRIES + j + 2

    @overload
    def _segment(self, ip: int, base: int, create: Literal[True]) -> int: ...
    @overload
    def _segment(self, ip: int, base: int, create: bool) -> int | None: ...
    def _segment(self, ip: int, base: int, create: bool) -> int | None:
        tag = ip << 32 | (base + 1)
        off = self._segments.get(tag)
        if off is not None or not create:
            return off
        slot = self._next_slot
        if slot % SEGMENT_ENTRIES == 0:
            slot += 1
        unit, j = divmod(slot, SEGMENT_ENTRIES)
        if unit >= self._units:
            os.ftruncate(self._fd, (unit + 1) * UNIT_BYTES)  # sparse
            pwrite_all(self._fd, ENTRY.pack(HEADER_MAGIC), unit * UNIT_BYTES)
            self._units = unit + 1
        pwrite_all(self._fd, ENTRY.pack(tag), unit * UNIT_BYTES + j * 8)
        off = unit * UNIT_BYTES + j * SEGMENT_BYTES
        self._segments[tag] = off
        self._next_slot = slot + 1
        return off

    def put_run(self, ip: int, first_seq: int, positions: np.ndarray) -> None:
        """Addresses of consecutive sequence numbers from ``first_seq`` (node-assigned IDs):
        one positional write per index segment the run spans."""
        raw = memoryview(np.add(positions, 1, dtype="<u8", casting="unsafe").tobytes())
        n = len(positions)
        done = 0
        while done < n:
            base, idx = divmod(first_seq + done, SEGMENT_ENTRIES)
            take = min(n - done, SEGMENT_ENTRIES - idx)
            off = self._segment(ip, base, create=True)
            pwrite_all(self._fd, raw[done * 8 : (done + take) * 8], off + idx * 8)
            done += take

    def put(self, ip: int, seq: int, position: int) -> None:
        base, idx = divmod(seq, SEGMENT_ENTRIES)
        off = self._segment(ip, base, create=True)
        pwrite_all(self._fd, ENTRY.pack(position + 1), off + idx * 8)

    def get(self, ip: int, seq: int) -> int | None:
        """Commit-log position of (IP, seq), or None."""
        base, idx = divmod(seq, SEGMENT_ENTRIES)
        off = self._segment(ip, base, create=False)
        if off is None:
            return None
        value = ENTRY.unpack(pread_exact(self._fd, 8, off + idx * 8))[0]
        return value - 1 if value else None

    def next_seq(self, ip: int) -> int:
        """One past the highest sequence number recorded for ``ip`` (0 if none)."""
        bases = [(tag & 0xFFFFFFFF) - 1 for tag in self._segments if tag >> 32 == ip]
        if not bases:
            return 0
        base = max(bases)
        seg = np.frombuffer(
            pread_exact(self._fd, SEGMENT_BYTES, self._segments[ip << 32 | (base + 1)]), dtype="<u8"
        )
        used = np.flatnonzero(seg)
        return base * SEGMENT_ENTRIES + (int(used[-1]) + 1 if len(used) else 0)

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)
