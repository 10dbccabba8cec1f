"""The commit log: one sequential log for all topics, with a double-buffered write cache.

One object in four layers, a module each (see ``log_state`` for why layers of one class):

* ``log_state.LogState``       positions, segments, the mutex and its wait queues;
* ``write_cache.WriteCache``   appends into the active buffer; reads of unwritten bytes;
* ``log_flusher.LogFlusher``   the flusher and syncer: write, fsync, acknowledge;
* ``CommitLog`` (here)         reads of records and frames, and log shipping.

What other parts use is a method or a documented attribute: the append path (``append``,
``wait_durable``, ``backpressure``, ``abandon``, ``error``), readers (``read``, ``span``,
``keep_frame``), recovery (``install``, ``set_end``, ``truncate_to``, ``read_segment``), the
lifecycle (``install``, ``remove``, ``is_sealed``, ``segment_end``) and log shipping
(``read_frames`` out, ``append_frames`` in at the same positions and segment boundaries,
``restart_at`` for an empty copy, ``truncate_to`` to cut a divergent tail).
"""

from __future__ import annotations

import bisect
import os
import time

from storage_node.backend.files import fsync_dir
from storage_node.errors import InvalidArgument, OffsetOutOfRange, Unavailable
from storage_node.formats.filenames import State, segment_name
from storage_node.formats.frame_walker import check_frames, last_batch_end
from storage_node.formats.record import Record, decode_row, frame_offset_of_row, verified_frame
from storage_node.store.log_flusher import NO_SPACE_ERRNOS, LogFlusher
from storage_node.store.log_state import FRAME_CACHE, Chunk
from storage_node.store.segment_readers import RawSegment, SegmentHandle

__all__ = ["NO_SPACE_ERRNOS", "CommitLog"]


class CommitLog(LogFlusher):
    """The commit log: reads and log shipping, over the write cache and the flusher."""

    # ---- reads -----------------------------------------------------------------------
    def read(self, pos: int) -> Record:
        """The record at log position ``pos`` (its frame CRC-checked; CorruptData if it fails)."""
        if pos < self.start_pos or pos >= self.end:
            raise OffsetOutOfRange(f"log position {pos} is not held")
        for start, end, frame in reversed(self._frames):
            if start <= pos < end:
                return decode_row(frame, pos - start)
        hit = self._cached(pos)
        if hit is not None:
            buf, off = hit
            where = f"at log position {pos}"
        else:
            seg = self._segment_at(pos)
            if seg is None:  # swapped or expired meanwhile
                return self.read(pos)
            try:
                buf, off = seg.record_view(pos - seg.start)
            except FileNotFoundError:
                if self.segments.get(seg.start) is seg:
                    raise
                return self.read(pos)  # compacted or expired meanwhile: ask the new handle
            where = f"at log position {pos} ({seg.state} segment {segment_name(seg.start)})"
        frame_off = frame_offset_of_row(buf, off)
        frame = verified_frame(buf, frame_off, where)
        start = pos - (off - frame_off)
        self._frames = [*self._frames[-(FRAME_CACHE - 1) :], (start, start + len(frame), frame)]
        return decode_row(frame, off - frame_off)

    def span(self, pos: int, want_end: int) -> tuple[bytes | memoryview, int, str]:
        """A buffer of log bytes holding the whole frame of the row at ``pos``, starting at a
        frame boundary and reaching towards ``want_end`` where that is cheap (a run of
        consecutive frames for a columnar read): (buffer, log position of its first byte,
        where it came from, for error messages). Nothing in it is checked yet."""
        if pos < self.start_pos or pos >= self.end:
            raise OffsetOutOfRange(f"log position {pos} is not held")
        hit = self._cached(pos)
        if hit is not None:
            buf, off = hit
            return buf, pos - off, "in the write cache"
        seg = self._segment_at(pos)
        if seg is None:  # swapped or expired meanwhile
            return self.span(pos, want_end)
        rel = pos - seg.start
        try:
            if isinstance(seg, RawSegment):
                buf, lo = seg.span_view(rel, want_end - seg.start)
            else:
                buf, off = seg.record_view(rel)
                lo = rel - off
        except FileNotFoundError:
            if self.segments.get(seg.start) is seg:
                raise
            return self.span(pos, want_end)  # compacted or expired meanwhile
        return buf, seg.start + lo, f"{seg.state} segment {segment_name(seg.start)}"

    def _segment_at(self, pos: int) -> SegmentHandle | None:
        """The segment holding ``pos`` (None if it was swapped or expired meanwhile: ask
        again); OffsetOutOfRange before the first one."""
        starts = self.starts
        i = bisect.bisect_right(starts, pos) - 1
        if i < 0:
            raise OffsetOutOfRange(f"log position {pos} is not held")
        return self.segments.get(starts[i])

    def read_segment(self, start: int) -> bytes:
        """The raw bytes of the segment that starts at ``start`` (decompressed, every block
        checked; CorruptData for a segment that failed its checks)."""
        return self.segments[start].read_all()

    def cached_frame(self, pos: int) -> tuple[int, memoryview] | None:
        """A recently read, already checked frame holding ``pos`` (start, frame), if any."""
        for start, end, frame in reversed(self._frames):
            if start <= pos < end:
                return start, frame
        return None

    def keep_frame(self, start: int, frame: memoryview) -> None:
        """Remember a checked frame for the next read (a tailing consumer reads it again)."""
        self._frames = [*self._frames[-(FRAME_CACHE - 1) :], (start, start + len(frame), frame)]

    # ---- log shipping and recovery ---------------------------------------------------
    def truncate_to(self, pos: int) -> int:
        """Cut the log back to ``pos``, a frame boundary at or after the first unsealed byte
        that must go: recovery's torn tail, or a replica's divergent suffix. Everything
        appended is flushed first; segments that begin after ``pos`` are deleted and the one
        holding ``pos`` is cut (to nothing when it begins there). Returns the bytes removed. The derived indexes are
        the caller's to cut back."""
        if pos >= self.end:
            return 0
        if self._thread is not None:
            self.flush()
        with self._cond:
            if pos < self.start_pos or self._active or self._in_flush:
                raise InvalidArgument(f"cannot truncate the log to {pos}")
            doomed = [s for s in self.starts if s > pos]
            keep = [s for s in self.starts if s <= pos]
            files = [self.segments[s] for s in doomed + keep[-1:]]
            raw = [h for h in files if isinstance(h, RawSegment)]
            if len(raw) != len(files):
                raise InvalidArgument(f"log position {pos} is in a sealed, compacted segment")
            removed = self.end - pos
            if self._write_fd is not None:
                os.close(self._write_fd)
                self._write_fd, self._write_seg = None, -1
            for handle in raw:
                if handle.start > pos:
                    del self.segments[handle.start]
                    self.starts.remove(handle.start)
                    handle.close()
                    os.unlink(handle.path)
                else:
                    handle.close()
                    os.truncate(handle.path, pos - handle.start)
                    fd = os.open(handle.path, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            fsync_dir(self.dirs[State.UNSEALED])
            self._frames = []
            self.cuts += 1
            self.set_end(pos)
            self._sync_asked = min(self._sync_asked, pos)
        return removed

    _raw_cache: tuple[int, bytes] | None = None  # one inflated segment (read_frames)
    # times the log was cut or restarted (truncate_to, restart_at): bytes read before may
    # no longer be what its positions hold (a SpanMemo kept across requests checks it)
    cuts = 0

    def read_frames(self, pos: int, max_bytes: int) -> tuple[int, bytes]:
        """Log bytes as they are, for another log to copy: whole batches from ``pos`` (a
        batch boundary) on, within one segment, as many as fit ``max_bytes`` (a bigger
        batch comes whole), and only bytes in files (``shippable_end``: their fsync may
        still be running): (segment start, bytes). Empty at ``shippable_end``, or when a
        batch goes on into the next segment; OffsetOutOfRange outside the log."""
        start, data = self._file_bytes(pos, max_bytes)
        cut = last_batch_end(data, 0, len(data))
        if cut == 0 and data:  # a batch bigger than ``max_bytes``: that batch alone
            start, data = self._file_bytes(pos, self.segment_end(start) - pos)
            cut = last_batch_end(data, 0, len(data), first=True)
        return start, data[:cut]

    def _file_bytes(self, pos: int, max_bytes: int) -> tuple[int, bytes]:
        """Bytes in files from ``pos`` on, within one segment, at most ``max_bytes``."""
        written = self.shippable_end
        if pos < self.start_pos or pos > written:
            raise OffsetOutOfRange(f"log position {pos} is not held (written end {written})")
        if pos == written:
            return pos, b""
        seg = self._segment_at(pos)
        if seg is None:  # expired or swapped meanwhile
            return self._file_bytes(pos, max_bytes)
        start = seg.start
        end = min(written, self.segment_end(start), pos + max_bytes)
        try:
            if isinstance(seg, RawSegment):
                data = os.pread(seg.fd(), end - pos, pos - start)
            else:
                cached = self._raw_cache
                if cached is None or cached[0] != start:
                    cached = self._raw_cache = (start, seg.read_all())  # checked, inflated
                data = cached[1][pos - start : end - start]
        except FileNotFoundError:
            if self.segments.get(start) is seg:
                raise
            return self._file_bytes(pos, max_bytes)  # compacted or expired meanwhile
        return start, data

    def append_frames(self, data: bytes, pos: int, seg: int) -> int:
        """(A copy of another log, append lock held.) Queue ``data``, whole batches read
        from that log (``read_frames``), at exactly ``pos`` in its segment ``seg``: the copy
        keeps the other log's positions and segment boundaries byte for byte. Every frame
        is checked first (CorruptData) and nothing is written unless all pass. Returns the
        number of frames; the derived indexes are the caller's (as recovery builds them)."""
        if not data:
            raise InvalidArgument("append_frames takes at least one whole batch")
        count = check_frames(data)
        if self._error is not None:
            raise self._error
        if self._closing:
            raise Unavailable("store is closing")
        if pos != self.end:
            raise OffsetOutOfRange(f"log copy expected at position {self.end}, not {pos}")
        if seg == pos and seg != self.fill_seg:  # the leader began a segment here
            self.fill_seg = pos
            self.fill_bytes = 0
        with self._cond:
            if not self._active:
                self._active_since = time.monotonic()
            self._register_segment(self.fill_seg)
            self._active.append(Chunk(pos, self.fill_seg, data, count, len(data)))
            self._active_bytes += len(data)
            self._active_count += count
            self.fill_bytes += len(data)
            self.end = pos + len(data)
            if self._should_flush_locked():
                self._kick.notify()
        return count

    def restart_at(self, pos: int) -> None:
        """(An empty follower log.) Begin at ``pos``: the leader no longer holds anything
        before it (expired), so the copy starts there."""
        if self.starts or self.end:
            raise InvalidArgument("only an empty log can start at another position")
        self.end = self.written_end = self.shippable_end = self.durable_end = pos
        self.cuts += 1
        self.start_pos = pos
        self.fill_seg = pos
        self.fill_bytes = 0
