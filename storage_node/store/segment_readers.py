"""Readers of one commit-log segment in each lifecycle state.

``unsealed`` segments are plain files read with pread; ``compacted`` ones are block files
read through their block index; ``uploaded`` ones are the same block files read with ranged
GETs from the object store. All answer ``record_view(rel)``: a buffer holding the whole frame
of the record at relative position ``rel``, and the offset of the record's row in it; and
``read_all()``: the segment's raw bytes (decompressed).
"""

from __future__ import annotations

import json
import os
import threading

from storage_node.backend.files import pread_exact
from storage_node.backend.objectstore import ObjectStore
from storage_node.errors import CorruptData
from storage_node.formats.compressed import CompressedSegmentReader
from storage_node.formats.filenames import State
from storage_node.formats.record import FRAME_SIZE, frame_length, row_frame_start
from storage_node.store.pinned import pinned_reader

READ_AHEAD = 20 * 1024  # a whole frame of small messages (about 16 KiB) in one read
SPAN_MAX = 1 << 20  # the most one positional read of frames for log shipping fetches
SCAN_SPAN_MAX = 8 << 20  # the most one positional read of a columnar scan fetches


class RawSegment:
    """An unsealed (active or sealed) segment file."""

    state = State.UNSEALED

    def __init__(self, start: int, path: str) -> None:
        self.start = start
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def fd(self) -> int:
        if self._fd is None:
            with self._lock:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDONLY)
        return self._fd

    @property
    def raw_size(self) -> int:
        try:
            return os.path.getsize(self.path)
        except FileNotFoundError:
            return 0

    stored_size = raw_size

    def _frame_start(self, fd: int, rel: int) -> int:
        """Where the frame of the row at ``rel`` starts (from the row's index)."""
        index = os.pread(fd, 2, rel)
        if len(index) < 2:
            raise CorruptData(f"no record at {rel} of segment {self.start:020d}")
        start = row_frame_start(index, rel)
        if start < 0:
            raise CorruptData(f"record at {rel} of segment {self.start:020d} has a bad row")
        return start

    @staticmethod
    def _read_frames(fd: int, start: int, length: int) -> bytes:
        """``length`` bytes from ``start``, more when the first frame claims more (and the
        file holds them): the result always holds that whole frame."""
        data = os.pread(fd, length, start)
        if len(data) >= 4:
            size = frame_length(data)
            if len(data) < size <= os.fstat(fd).st_size - start:
                data = pread_exact(fd, size, start)
        return data

    def record_view(self, rel: int) -> tuple[bytes, int]:
        fd = self.fd()
        start = self._frame_start(fd, rel)
        return self._read_frames(fd, start, READ_AHEAD), rel - start

    def span_view(self, rel: int, want_end: int) -> tuple[bytes, int]:
        """Bytes from the start of the frame holding the row at ``rel`` on, reaching towards
        ``want_end`` (relative; at most SCAN_SPAN_MAX, at least the whole frame), and that
        start: a columnar scan fetches many consecutive frames with one positional read (a
        page of one partition spans the rows of all the partitions written with it)."""
        fd = self.fd()
        start = self._frame_start(fd, rel)
        length = min(SCAN_SPAN_MAX, max(READ_AHEAD, want_end + READ_AHEAD - start))
        return self._read_frames(fd, start, length), start

    def frames_at(self, rel: int, length: int) -> bytes:
        """About ``length`` bytes from the frame boundary ``rel`` (at most SPAN_MAX, at least
        the whole first frame; fewer at the end of the file): frames for log shipping."""
        return self._read_frames(self.fd(), rel, min(SPAN_MAX, max(FRAME_SIZE, length)))

    def read_all(self) -> bytes:
        with open(self.path, "rb") as fh:
            return fh.read()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class BlockSegment:
    """A compacted segment, local (pread) or uploaded (ranged object reads)."""

    def __init__(self, start: int, state: str, reader: CompressedSegmentReader, where: str) -> None:
        self.start = start
        self.state = state
        self.reader = reader
        self.where = where
        self._fd: int | None = None

    @classmethod
    def local(cls, start: int, path: str) -> BlockSegment:
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        try:
            reader = CompressedSegmentReader(size, lambda o, n: pread_exact(fd, n, o))
        except CorruptData:
            os.close(fd)
            raise
        seg = cls(start, State.COMPACTED, reader, path)
        seg._fd = fd
        return seg

    @classmethod
    def remote(cls, start: int, manifest_path: str, objects: ObjectStore) -> BlockSegment:
        with open(manifest_path, "rb") as fh:
            manifest = json.loads(fh.read())
        key = manifest["object_key"]
        reader = CompressedSegmentReader(
            int(manifest["stored_size"]), pinned_reader(manifest, objects, key)
        )
        return cls(start, State.UPLOADED, reader, key)

    @property
    def raw_size(self) -> int:
        return self.reader.raw_size

    @property
    def stored_size(self) -> int:
        return self.reader.stored_size

    def record_view(self, rel: int) -> tuple[bytes, int]:
        return self.reader.read_at(rel)

    def read_all(self) -> bytes:
        """The raw (decompressed) bytes of the whole segment, every block checked."""
        return self.reader.read_all()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class CorruptSegment:
    """Stand-in for a segment file that failed its checks at open: reads report, never serve."""

    def __init__(self, start: int, state: str, size: int, reason: str) -> None:
        self.start = start
        self.state = state
        self.raw_size = size
        self.stored_size = size
        self.reason = reason

    def record_view(self, rel: int) -> tuple[bytes, int]:
        raise CorruptData(f"segment {self.start:020d} is corrupt: {self.reason}")

    def read_all(self) -> bytes:
        raise CorruptData(f"segment {self.start:020d} is corrupt: {self.reason}")

    def close(self) -> None:
        pass


SegmentHandle = RawSegment | BlockSegment | CorruptSegment
