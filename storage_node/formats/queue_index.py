"""Queue index: per topic and partition, fixed 20-byte entries so offset n is found in O(1).

Entry: u64 log_position, u32 record_size, u64 tag_hash (seeds 003/004). Files hold
``entries_per_file`` entries and are named by their first queue offset (20 digits). New
entries collect in memory and reach the files in large positional writes (at 64 KiB, on
``sync`` and ``close``): the index is derived data that recovery rebuilds from the log past
the last checkpoint, and every checkpoint syncs it first. Reads see pending entries too.
The partition's stored bytes (``stored_bytes``: the sum of its entries' record sizes) are
summed from the files once, on first use, and kept up to date from then on.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib

import numpy as np

from storage_node.backend.files import ensure_dir, pread_exact, pwrite_all, remove_file
from storage_node.formats.filenames import parse_queue_file_name, queue_file_name
from storage_node.formats.packed import PackedColumn

ENTRY_DTYPE = np.dtype([("pos", "<u8"), ("size", "<u4"), ("tag", "<u8")])
ENTRY_SIZE = ENTRY_DTYPE.itemsize
ENTRY = struct.Struct("<QIQ")
PENDING_BYTES = 64 * 1024
SUM_CHUNK = 1 << 18  # entries read at a time when summing sizes (5 MiB)
assert ENTRY_SIZE == 20


def tag_hash(tag: bytes | None) -> int:
    """0 for no tag; a tag hashing to 0 is still checked against the record's real tag."""
    return 0 if tag is None else zlib.crc32(tag) + 1


def tag_hashes(tags: PackedColumn) -> np.ndarray:
    """``tag_hash`` of every tag of a packed column (tags are rare: one call per tag)."""
    return np.fromiter(map(tag_hash, tags.to_list()), dtype=np.uint64, count=len(tags.lens))


class QueueIndex:
    """Entries of one partition. Writers are serialised by the store; readers may run alongside."""

    def __init__(
        self, directory: str, entries_per_file: int, next_offset: int | None = None
    ) -> None:
        self.dir = ensure_dir(directory)
        self.per_file = entries_per_file
        self._fds: dict[int, int] = {}
        self._lock = threading.RLock()  # fds may be evicted: IO happens under it
        self._pending = bytearray()  # entries from self._pending_from on, not yet written
        self._pending_from = 0
        self._unsynced = False  # written since the last fsync
        self._bytes: int | None = None  # stored_bytes, once summed
        self._changes = 0  # truncates and drops: a sum read outside the lock is stale if it moved
        starts = sorted(
            s for s in map(parse_queue_file_name, os.listdir(self.dir)) if s is not None
        )
        self.file_starts = starts
        if next_offset is None:
            next_offset = 0
            if starts:
                size = os.path.getsize(self._path(starts[-1]))
                next_offset = starts[-1] + size // ENTRY_SIZE
        self.next_offset = next_offset
        # no files left (all expired): the partition is empty from next_offset on
        self.first_offset = min(starts[0], next_offset) if starts else next_offset
        self.truncate(next_offset)

    def _path(self, start: int) -> str:
        return os.path.join(self.dir, queue_file_name(start))

    def _fd(self, start: int, create: bool = False) -> int:
        with self._lock:
            fd = self._fds.get(start)
            if fd is None:
                flags = os.O_RDWR | (os.O_CREAT if create else 0)
                fd = os.open(self._path(start), flags, 0o644)
                if len(self._fds) >= 4:
                    oldest = min(k for k in self._fds if k != start)
                    old_fd = self._fds.pop(oldest)
                    os.fsync(old_fd)  # a checkpoint only syncs the fds still open
                    os.close(old_fd)
                self._fds[start] = fd
                if create and start not in self.file_starts:
                    self.file_starts.append(start)
                    self.file_starts.sort()
            return fd

    def append(self, entries: np.ndarray) -> int:
        """Add entries at ``next_offset``; returns the first offset they got."""
        first = self.next_offset
        with self._lock:
            if not self._pending:
                self._pending_from = first
            self._pending += entries.tobytes()
            self.next_offset = first + len(entries)
            if self._bytes is not None:
                self._bytes += int(entries["size"].sum())
            if len(self._pending) >= PENDING_BYTES:
                self._write_pending()
        return first

    def _write_pending(self) -> None:
        """Write the pending entries: one positional write per file touched (lock held)."""
        raw = memoryview(self._pending)
        first, n = self._pending_from, len(self._pending) // ENTRY_SIZE
        done = 0
        while done < n:
            off = first + done
            start = off - off % self.per_file
            take = min(n - done, start + self.per_file - off)
            pwrite_all(
                self._fd(start, create=True),
                raw[done * ENTRY_SIZE : (done + take) * ENTRY_SIZE],
                (off - start) * ENTRY_SIZE,
            )
            done += take
        raw.release()
        self._pending = bytearray()
        self._pending_from = first + n
        self._unsynced = True

    def read_bytes(self, offset: int, count: int) -> bytes:
        """The raw entries (20 bytes each) of up to ``count`` offsets from ``offset``."""
        tail = b""
        with self._lock:
            count = max(0, min(count, self.next_offset - offset))
            if self._pending and offset + count > self._pending_from:
                skip = max(0, offset - self._pending_from) * ENTRY_SIZE
                stop = (offset + count - self._pending_from) * ENTRY_SIZE
                tail = bytes(self._pending[skip:stop])
                count = max(0, self._pending_from - offset)  # what the files still hold
        parts = []
        while count > 0:
            start = offset - offset % self.per_file
            take = min(count, start + self.per_file - offset)
            with self._lock:
                parts.append(
                    pread_exact(self._fd(start), take * ENTRY_SIZE, (offset - start) * ENTRY_SIZE)
                )
            offset += take
            count -= take
        if tail:
            parts.append(tail)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read(self, offset: int, count: int) -> np.ndarray:
        """Up to ``count`` entries from ``offset`` (fewer at the end), as a numpy array."""
        return np.frombuffer(self.read_bytes(offset, count), dtype=ENTRY_DTYPE)

    def entries(self, offset: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` (position, size, tag hash) tuples; cheaper than numpy for few."""
        return list(ENTRY.iter_unpack(self.read_bytes(offset, count)))

    def stored_bytes(self) -> int:
        """The bytes of the records from ``first_offset`` to ``next_offset`` (key, tag, ID,
        headers, body and row header of each, as written to the log before any file
        compression). The first call reads the entries' sizes outside the lock, so appends
        go on meanwhile (and reads again if retention or recovery moved the range); then
        ``append``, ``drop_before`` and ``truncate`` keep the sum."""
        for _attempt in range(2):
            with self._lock:
                if self._bytes is not None:
                    return self._bytes
                changes, first, end = self._changes, self.first_offset, self.next_offset
            try:
                total = self._sum_sizes(first, end)
            except OSError:  # a file expired while it was read
                continue
            with self._lock:
                if self._changes == changes and self._bytes is None:
                    self._bytes = total + self._sum_sizes(end, self.next_offset)
                    return self._bytes
        with self._lock:  # the range kept moving: sum it holding the lock
            if self._bytes is None:
                self._bytes = self._sum_sizes(self.first_offset, self.next_offset)
            return self._bytes

    def _sum_sizes(self, offset: int, end: int) -> int:
        total = 0
        while offset < end:
            take = min(SUM_CHUNK, end - offset)
            total += int(self.read(offset, take)["size"].sum(dtype=np.uint64))
            offset += take
        return total

    def truncate(self, next_offset: int) -> None:
        """Drop entries at and after ``next_offset`` (recovery rewrites them from the log)."""
        with self._lock:
            self._bytes, self._changes = None, self._changes + 1
            if self._pending:
                keep = max(0, next_offset - self._pending_from) * ENTRY_SIZE
                del self._pending[keep:]
                if self._pending:
                    self._write_pending()
        for start in list(self.file_starts):
            path = self._path(start)
            if start >= next_offset and start != self.file_starts[0]:
                self._close(start)
                remove_file(path)
                self.file_starts.remove(start)
            else:
                keep = max(0, min(next_offset - start, self.per_file)) * ENTRY_SIZE
                if os.path.getsize(path) > keep:
                    os.truncate(path, keep)
        self.next_offset = next_offset

    def drop_before(self, offset: int) -> None:
        """Expire whole files that end at or before ``offset`` and raise first_offset."""
        with self._lock:
            first = max(self.first_offset, offset)
            if self._bytes is not None and first > self.first_offset:
                self._bytes -= self._sum_sizes(self.first_offset, min(first, self.next_offset))
            self._changes += 1
            for start in list(self.file_starts):
                if start + self.per_file <= offset and start + self.per_file <= self.next_offset:
                    self._close(start)
                    remove_file(self._path(start))
                    self.file_starts.remove(start)
            self.first_offset = first

    def sync(self) -> None:
        """Write pending entries and fsync the files (nothing to do if nothing changed)."""
        with self._lock:
            if self._pending:
                self._write_pending()
            if not self._unsynced:
                return
            self._unsynced = False
            for fd in self._fds.values():
                os.fsync(fd)

    def _close(self, start: int) -> None:
        with self._lock:
            fd = self._fds.pop(start, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            if self._pending:
                self._write_pending()
        for start in list(self._fds):
            self._close(start)
