"""Unsealed key index: the RocketMQ IndexFile layout (head-inserted hash chains).

Layout::

    header (40 B): i64 begin_ms, i64 end_ms, i64 begin_pos, i64 end_pos, u32 used_slots, u32 count
    slots        : slot_count x u32, number of the newest item of the slot (0 = empty)
    items        : item_count x 20 B (u32 key_hash, u64 log_position, u32 time_delta_s, u32 prev)
    trailer      : b"MKIX" u32 version u32 slot_count u32 item_count

Item 0 is never used so 0 can mean "no item" (as in RocketMQ); ``count`` is the next item
number. The file is created sparse with ftruncate and memory-mapped; only its slot table
(20 MB by default, written in random order) is faulted in up front, so the ~400 MB of items
cost nothing until written. A batch is inserted with numpy: items are appended in
order, and each one's ``prev`` is the previous item of the same slot in the batch or the old
slot head, so chains stay newest-first without a per-item Python loop.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator

import numpy as np

from storage_node.errors import CorruptData

HEADER = struct.Struct("<qqqqII")
TRAILER = struct.Struct("<4sIII")
MAGIC = b"MKIX"
VERSION = 1
ITEM = struct.Struct("<IQII")
ITEM_DTYPE = np.dtype([("hash", "<u4"), ("pos", "<u8"), ("tsec", "<u4"), ("prev", "<u4")])
assert ITEM_DTYPE.itemsize == ITEM.size == 20


MADV_POPULATE_WRITE = 23  # Linux 5.14+: fault pages in, writable, in one call


def _populate(mm: mmap.mmap, offset: int, length: int) -> None:
    """Fault the slot table in at creation, as RocketMQ warms its mapped files: slots are
    written in random order, and a first write to each page of a fresh sparse mapping
    costs a page fault with block reservation (measured: 100k random slot writes took
    37-53 ms without this, 15-18 ms to populate plus 2 ms with it). Kernels without the
    call keep the lazy faults."""
    start = offset - offset % mmap.PAGESIZE
    try:
        mm.madvise(MADV_POPULATE_WRITE, start, offset + length - start)
    except (OSError, ValueError):
        pass


def file_size(slots: int, items: int) -> int:
    return HEADER.size + 4 * slots + ITEM.size * items + TRAILER.size


class KeyIndexFile:
    """One memory-mapped IndexFile; appends are not thread-safe (the store serialises them)."""

    def __init__(self, path: str, fd: int, mm: mmap.mmap, slots: int, items: int) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self._fd = fd
        self._mm = mm
        self._closed = False
        self.slot_count = slots
        self.item_capacity = items
        self.items_base = HEADER.size + 4 * slots
        self.slots = np.ndarray((slots,), dtype="<u4", buffer=mm, offset=HEADER.size)
        self.items = np.ndarray((items,), dtype=ITEM_DTYPE, buffer=mm, offset=self.items_base)
        # one view per field, made once: a batch's items are four slice writes
        self._fields = [self.items[f] for f in ("hash", "pos", "tsec", "prev")]
        (self.begin_ms, self.end_ms, self.begin_pos, self.end_pos, self.used_slots, self.count) = (
            HEADER.unpack_from(mm, 0)
        )

    @classmethod
    def create(
        cls, path: str, slots: int, items: int, begin_ms: int, begin_pos: int
    ) -> KeyIndexFile:
        size = file_size(slots, items)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.ftruncate(fd, size)  # sparse: no zero-fill
        os.pwrite(fd, HEADER.pack(begin_ms, begin_ms, begin_pos, begin_pos, 0, 1), 0)
        os.pwrite(fd, TRAILER.pack(MAGIC, VERSION, slots, items), size - TRAILER.size)
        mm = mmap.mmap(fd, size)
        _populate(mm, HEADER.size, 4 * slots)
        return cls(path, fd, mm, slots, items)

    def take_as(self, path: str, begin_ms: int, begin_pos: int) -> None:
        """Give a file made ahead of need (still empty) its name and first position: a
        rename and a header write, no new file or mapping."""
        if self.count != 1:
            raise ValueError("only an empty key index can be taken as a new one")
        os.rename(self.path, path)
        self.path, self.name = path, os.path.basename(path)
        self.begin_ms = self.end_ms = begin_ms
        self.begin_pos = self.end_pos = begin_pos
        self._write_header()

    @classmethod
    def open(cls, path: str) -> KeyIndexFile:
        fd = os.open(path, os.O_RDWR)
        size = os.fstat(fd).st_size
        if size < HEADER.size + TRAILER.size:
            os.close(fd)
            raise CorruptData(f"key index {os.path.basename(path)} too short")
        magic, version, slots, items = TRAILER.unpack(
            os.pread(fd, TRAILER.size, size - TRAILER.size)
        )
        if magic != MAGIC or version != VERSION or file_size(slots, items) != size:
            os.close(fd)
            raise CorruptData(f"key index {os.path.basename(path)} has a bad trailer")
        return cls(path, fd, mmap.mmap(fd, size), slots, items)

    @property
    def full(self) -> bool:
        return self.count >= self.item_capacity

    @property
    def free(self) -> int:
        return self.item_capacity - self.count

    def add_batch(self, hashes: np.ndarray, positions: np.ndarray, store_ms: int) -> int:
        """Insert as many (hash, position) pairs as fit; returns how many were added.

        Items are written before the slot heads that lead readers to them. In the usual
        batch no two items share a slot: each item's prev is its slot's old head, found by
        writing the heads and reading them back, without sorting. Items that do share a slot
        are then chained newest first (readers briefly see those not-yet-acknowledged items
        unchained, never a broken older chain).
        """
        n = min(len(hashes), self.free)
        if n <= 0:
            return 0
        hashes = hashes[:n].astype("<u4", copy=False)
        first = self.count
        numbers = np.arange(first, first + n, dtype="<u4")
        slot_of = np.remainder(hashes, self.slot_count, dtype=np.intp)
        old_heads = self.slots[slot_of]
        self._write_items(first, n, hashes, positions, store_ms, old_heads)
        self.slots[slot_of] = numbers
        if n > 1 and not (self.slots[slot_of] == numbers).all():
            order = np.argsort(slot_of, kind="stable")
            sorted_slots = slot_of[order]
            sorted_numbers = numbers[order]
            starts = np.ones(n, dtype=bool)
            starts[1:] = sorted_slots[1:] != sorted_slots[:-1]
            prev_sorted = old_heads[order]
            prev_sorted[~starts] = sorted_numbers[np.flatnonzero(~starts) - 1]
            prev = np.empty(n, dtype="<u4")
            prev[order] = prev_sorted
            self._fields[3][first : first + n] = prev
            ends = np.ones(n, dtype=bool)
            ends[:-1] = sorted_slots[:-1] != sorted_slots[1:]
            self.slots[sorted_slots[ends]] = sorted_numbers[ends]
            old_heads = old_heads[order][starts]  # one per slot, for the count below
        self.used_slots += len(old_heads) - int(np.count_nonzero(old_heads))
        self._write_header()
        return n

    def _write_items(
        self,
        first: int,
        n: int,
        hashes: np.ndarray,
        positions: np.ndarray,
        store_ms: int,
        prev: np.ndarray,
    ) -> None:
        tsec = max(0, (store_ms - self.begin_ms) // 1000) if self.count > 1 else 0
        if self.count <= 1:
            self.begin_ms = store_ms
            self.begin_pos = int(positions[0])
        end = first + n
        hash_field, pos_field, tsec_field, prev_field = self._fields
        hash_field[first:end] = hashes
        pos_field[first:end] = positions[:n]
        tsec_field[first:end] = tsec
        prev_field[first:end] = prev
        self.count = end
        self.end_ms = max(self.end_ms, store_ms)
        self.end_pos = int(positions[n - 1])

    def _write_header(self) -> None:
        HEADER.pack_into(
            self._mm,
            0,
            self.begin_ms,
            self.end_ms,
            self.begin_pos,
            self.end_pos,
            self.used_slots,
            self.count,
        )

    def truncate_to(self, count: int) -> None:
        """Forget items numbered ``count`` and above (recovery replays them from the log).

        Slot heads that point at forgotten items are walked back along their chains (links
        always point to older items) to the newest item that is kept, so replayed items link
        to the right predecessor.
        """
        count = max(1, count)
        heads = self.slots
        stale = np.flatnonzero(heads >= count)
        if len(stale):
            cur = heads[stale].astype(np.int64)
            while True:
                bad = cur >= count
                if not bad.any():
                    break
                nxt = np.zeros(len(cur), dtype=np.int64)
                inside = bad & (cur < self.item_capacity)
                nxt[inside] = self.items["prev"][cur[inside]]
                nxt[bad & (nxt >= cur)] = 0  # a damaged link ends the chain
                cur = np.where(bad, nxt, cur)
            heads[stale] = cur
        if count < self.count or len(stale):
            self.count = count
            self.used_slots = int(np.count_nonzero(heads))
            self._write_header()

    def candidates(self, khash: int, begin_ms: int, end_ms: int) -> Iterator[int]:
        """Log positions of items with this hash whose time may lie in range, newest first.

        Chain links always point to older (smaller) item numbers; items at or above
        ``count`` (written after the last checkpoint, then dropped by recovery) are skipped
        but followed, so a stale slot head still reaches the valid chain.
        """
        mm = self._mm
        unpack = ITEM.unpack_from
        base = self.items_base
        number = int(self.slots[khash % self.slot_count])
        begin_s = self.begin_ms
        limit = self.count
        while 0 < number:
            h, pos, tsec, prev = unpack(mm, base + number * 20)
            if number < limit:
                t = begin_s + tsec * 1000
                if t + 999 < begin_ms:
                    return  # every older item is older still
                if h == khash and t <= end_ms:
                    yield pos
            if prev >= number:
                return
            number = prev

    def flush(self) -> None:
        self._mm.flush()

    def trimmed_bytes(self) -> bytes:
        """Header + slots + used items + trailer: what compaction needs, without the empty tail."""
        end = self.items_base + self.count * ITEM.size
        return bytes(self._mm[:end]) + TRAILER.pack(
            MAGIC, VERSION, self.slot_count, self.item_capacity
        )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            del self.slots, self.items  # views of the mapping: dropped so that it can close
            self._fields = []
            try:
                self._mm.flush()
                self._mm.close()
            except BufferError:
                pass
            os.close(self._fd)
            del self._mm
