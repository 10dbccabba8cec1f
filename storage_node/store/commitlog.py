"""The commit log: one sequential log for all topics, with a double-buffered write cache.

Appends (serialised by the store's append lock) place encoded records into the *active*
cache buffer and decide segment boundaries. A flusher swaps the buffers, writes the full one
with one ``writev`` per segment touched, fsyncs, and wakes the waiters: in ``sync`` mode an
append returns after the fsync that covers it, so every batch that arrived during one fsync
shares the next one (group commit); the store's group-commit leader writes and fsyncs its
group itself (``wait_durable``). In ``async`` mode the flusher thread runs when the cache
reaches a count, byte or age threshold (seed 002) and a syncer thread runs the policy's
periodic fsyncs. Reads of positions not yet in a file are served from the cache.

What other parts use is a method or a documented attribute here: the append path
(``append``, ``wait_durable``, ``backpressure``, ``abandon``, ``error``), readers (``read``,
``span``, ``keep_frame``), recovery (``install``, ``set_end``, ``truncate_to``,
``read_segment``), the lifecycle (``install``, ``remove``, ``is_sealed``, ``segment_end``)
and log shipping (``read_frames``, ``append_frames``, ``truncate_to``).

Over 400 lines on purpose: the write cache, the flusher, the syncer and the reads share one
mutex and one set of positions (end, written, durable); split apart they would have to
reach into each other's state.
"""

from __future__ import annotations

import bisect
import errno
import os
import threading
import time
from dataclasses import dataclass

import numpy as np

from storage_node.backend.files import ensure_dir, fsync_dir, start_writeback, write_all
from storage_node.errors import (
    DiskFull,
    InvalidArgument,
    MsgStoreError,
    OffsetOutOfRange,
    Unavailable,
)
from storage_node.formats.record import (
    Piece,
    Record,
    decode_row,
    frame_offset_of_row,
    iter_frames,
    verified_frame,
)
from storage_node.formats.segment_name import segment_name
from storage_node.store.segment_readers import RawSegment, SegmentHandle

IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX"))  # pieces one gathering write takes
FRAME_CACHE = 16  # verified frames kept for reads
# Out of space: the disk (ENOSPC), a quota (EDQUOT) or the process file-size limit (EFBIG).
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@dataclass(slots=True)
class Chunk:
    pos: int  # log position of the first byte
    seg: int  # start position of the segment it belongs to
    data: bytes | list[Piece]  # contiguous, or the pieces of whole frames (gathering write)
    count: int
    size: int

    def contiguous(self) -> bytes:
        """The chunk as one buffer (joined once, for reads of not yet written messages)."""
        if isinstance(self.data, list):
            self.data = b"".join(self.data)
        return self.data


class CommitLog:
    def __init__(
        self,
        root: str,
        segment_bytes: int,
        flush_mode: str,
        flush_max_messages: int,
        flush_max_bytes: int,
        flush_max_age_ms: int,
        fsync_interval_ms: int = 1000,
        fsync_bytes: int = 8 << 20,
    ) -> None:
        self.root = root
        self.dirs = {
            s: ensure_dir(os.path.join(root, s)) for s in ("unsealed", "compacted", "uploaded")
        }
        self.segment_bytes = segment_bytes
        self.sync_mode = flush_mode == "sync"
        self.max_messages = flush_max_messages
        self.max_bytes = flush_max_bytes
        self.max_age = flush_max_age_ms / 1000.0
        self.segments: dict[int, SegmentHandle] = {}
        self.starts: list[int] = []
        self.retired: list[tuple[float, SegmentHandle]] = []
        self.start_pos = 0  # first position still held (expiry raises it)
        self.end = 0  # next position to hand out (includes the cache)
        self.written_end = 0  # bytes below this are in files
        self.durable_end = 0  # bytes below this are fsynced
        self.fill_seg = 0  # segment the next append goes to
        self.fill_bytes = 0
        # one mutex, three wait queues: producers waiting for durability or room, the flusher
        # thread, the syncer thread; each is woken only for what it waits for (a thread
        # hand-off costs tens of microseconds)
        mutex = threading.RLock()
        self._cond = threading.Condition(mutex)  # durability and backpressure waiters
        self._kick = threading.Condition(mutex)  # the flusher: something to flush
        self._sync_cond = threading.Condition(mutex)  # the syncer: an fsync to run
        self._active: list[Chunk] = []
        self._active_bytes = 0
        self._active_count = 0
        self._active_since = 0.0
        self._flushing: list[Chunk] = []
        self._waiters = 0
        self._in_flush = False  # one writer at a time: the flusher thread or a leader waiter
        # async mode writes on every flush but fsyncs at most this often (and whenever
        # somebody waits for durability: checkpoint, close, flush()); sync mode always fsyncs
        self.fsync_interval = fsync_interval_ms / 1000.0
        self.fsync_bytes = fsync_bytes  # async: also fsync once this much is unsynced
        self._last_fsync = time.monotonic()
        self._closing = False
        self._error: MsgStoreError | None = None
        self._write_fd: int | None = None
        self._write_seg = -1
        self._thread: threading.Thread | None = None
        # async mode: the fsyncs the policy asks for run on their own thread, so the flusher
        # keeps writing while the device works (a descriptor of its own, and the end it covers)
        self._syncer: threading.Thread | None = None
        self._sync_request: tuple[int, int] | None = None
        self._sync_asked = 0  # highest end handed to the syncer
        self.stats = {"flushes": 0, "fsyncs": 0, "bytes_written": 0}
        # recently read frames, already CRC-checked: consecutive reads of a partition find
        # their records in the same few frames. Replaced, never changed in place, so
        # readers on other threads can walk the list they got.
        self._frames: list[tuple[int, int, memoryview]] = []
        self._raw_cache: tuple[int, bytes] | None = None  # one inflated segment (read_raw)

    # ---- setup (recovery) -------------------------------------------------------------
    def install(self, start: int, handle: SegmentHandle) -> None:
        """Register (or replace, atomically for readers) the handle of a segment."""
        with self._cond:
            old = self.segments.get(start)
            self.segments[start] = handle
            if old is None:
                bisect.insort(self.starts, start)
            elif old is not handle:
                self.retired.append((time.monotonic(), old))

    def remove(self, start: int) -> None:
        with self._cond:
            old = self.segments.pop(start, None)
            if old is not None:
                self.starts.remove(start)
                self.retired.append((time.monotonic(), old))
            self.start_pos = self.starts[0] if self.starts else self.end

    def set_end(self, end: int) -> None:
        """After recovery: the log ends at ``end`` and the last unsealed segment is active."""
        self.end = self.written_end = self.durable_end = end
        if self.starts and isinstance(self.segments[self.starts[-1]], RawSegment):
            self.fill_seg = self.starts[-1]
            self.fill_bytes = end - self.fill_seg
        else:
            self.fill_seg = end
            self.fill_bytes = 0
        self.start_pos = self.starts[0] if self.starts else end

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._flush_loop, name="msgstore-flusher", daemon=True
        )
        self._thread.start()
        if not self.sync_mode:
            self._syncer = threading.Thread(
                target=self._sync_loop, name="msgstore-syncer", daemon=True
            )
            self._syncer.start()

    # ---- append path (caller holds the store's append lock) ---------------------------
    def append(self, data: bytes | list[Piece], sizes: np.ndarray) -> np.ndarray:
        """Queue ``data`` (whole frames of ``sizes``, contiguous or as a list of pieces);
        returns each frame's position. Frames, not records, are the unit of the log."""
        if self._error is not None:
            raise self._error
        if self._closing:
            raise Unavailable("store is closing")
        n = len(sizes)
        base = self.end
        rel = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(sizes[:-1], out=rel[1:])
        positions = rel + base
        total = int(rel[-1]) + int(sizes[-1])
        if isinstance(data, list) and total > self.segment_bytes - self.fill_bytes:
            data = b"".join(data)  # a batch that crosses a segment boundary is cut as bytes
        chunks: list[Chunk] = []
        done = 0
        off = 0
        if (
            self.fill_bytes
            and total > self.segment_bytes - self.fill_bytes
            and total <= self.segment_bytes
        ):
            self.fill_seg = base  # roll first: a batch that fits a segment is never split
            self.fill_bytes = 0
        while done < n:
            room = self.segment_bytes - self.fill_bytes
            if off == 0 and total <= room:
                take, take_bytes = n, total
            else:
                cum_end = rel[done:] - rel[done] + np.asarray(sizes[done:], dtype=np.int64)
                take = int(np.searchsorted(cum_end, room, side="right"))
                if take == 0 and self.fill_bytes == 0:
                    take = 1  # a frame bigger than a segment gets a segment of its own
                take_bytes = int(cum_end[take - 1]) if take else 0
            if take == 0:
                self.fill_seg = base + off  # roll: the next frame starts a new segment
                self.fill_bytes = 0
                continue
            piece = data if (off == 0 and take == n) else data[off : off + take_bytes]
            chunks.append(Chunk(base + off, self.fill_seg, piece, take, take_bytes))
            self.fill_bytes += take_bytes
            off += take_bytes
            done += take
        with self._cond:
            if not self._active:
                self._active_since = time.monotonic()
            for c in chunks:
                self._register_segment(c.seg)
                self._active.append(c)
            self._active_bytes += total
            self._active_count += n
            self.end = base + total
            if self._should_flush_locked():
                self._kick.notify()
        return positions

    def append_frames(self, data: bytes) -> np.ndarray:
        """Append whole frames as they are (log shipping): every frame is checked first and
        nothing is written unless all are whole and valid. Returns each frame's position;
        the derived indexes are the caller's (as recovery's replay builds them)."""
        sizes = [size for _off, size in iter_frames(data)]
        if not sizes or sum(sizes) != len(data):
            raise InvalidArgument("append_frames takes whole, valid record frames")
        return self.append(bytes(data), np.asarray(sizes, dtype=np.int64))

    @property
    def error(self) -> MsgStoreError | None:
        """The failed write's error that stops appends until the store recovers in place."""
        return self._error

    def refuse_appends(self, error: MsgStoreError) -> None:
        """Keep refusing appends with ``error`` (an in-place recovery that failed too: the
        next append tries again)."""
        with self._cond:
            self._error = error
            self._wake_all_locked()

    @property
    def in_flush(self) -> bool:
        """A write of the cache is in progress (by the flusher or a leader)."""
        return self._in_flush

    def abandon(self, pos: int, error: MsgStoreError) -> None:
        """Stop after a failed append: drop the cached bytes from ``pos`` on (not yet taken by
        a flush) and keep ``error`` until the store recovers in place (see Store)."""
        with self._cond:
            kept = [c for c in self._active if c.pos < pos]
            dropped = [c for c in self._active if c.pos >= pos]
            self._active = kept
            self._active_bytes -= sum(c.size for c in dropped)
            self._active_count -= sum(c.count for c in dropped)
            if dropped and not self._flushing:
                self.end = pos
            self._error = error
            self._wake_all_locked()

    def _wake_all_locked(self) -> None:
        """(Mutex held.) Closing or failing: every waiting thread looks again."""
        self._cond.notify_all()
        self._kick.notify_all()
        self._sync_cond.notify_all()

    def _register_segment(self, seg: int) -> None:
        if seg not in self.segments:
            self.segments[seg] = RawSegment(
                seg, os.path.join(self.dirs["unsealed"], segment_name(seg))
            )
            bisect.insort(self.starts, seg)

    def _roll_locked(self) -> None:
        self.fill_seg = self.end
        self.fill_bytes = 0

    def roll(self) -> None:
        """Start a new segment at the next append (seal the current one)."""
        if self.fill_bytes > 0:
            self._roll_locked()

    def _should_flush_locked(self) -> bool:
        if not self._active:
            # async: bytes written but not yet fsynced get their fsync within the interval
            return (
                not self.sync_mode
                and self.written_end > self.durable_end
                and time.monotonic() - self._last_fsync >= self.fsync_interval
            )
        return (
            self._closing
            or self._active_count >= self.max_messages
            or self._active_bytes >= self.max_bytes
            or time.monotonic() - self._active_since >= self.max_age
        )

    def wait_durable(self, target: int) -> None:
        """Block until every byte below ``target`` is fsynced (sync acknowledgement).

        A waiter that finds no flush in progress does the flush itself (leader-based group
        commit): no thread hand-off on the acknowledgement path, and every batch written
        while the leader fsyncs is taken by the next leader in one write and one fsync.
        """
        if self.durable_end >= target:  # already there: no mutex, no hand-off
            return
        cond = self._cond
        with cond:
            target = min(target, self.end)  # nothing beyond the end can become durable
            if self.durable_end >= target:
                return
            self._waiters += 1
            try:
                while self.durable_end < target:
                    if self._error is not None:
                        raise self._error
                    if (
                        not self._in_flush
                        and self._sync_asked < target  # else the syncer is on it
                        and (self._active or self.written_end > self.durable_end)
                    ):
                        batch = self._take_locked()
                        cond.release()
                        try:
                            self._flush_batch(batch)
                        finally:
                            cond.acquire()
                        continue
                    cond.wait(0.5)
            finally:
                self._waiters -= 1

    def backpressure(self) -> None:
        """Keep the cache bounded: wait while the unflushed bytes exceed four flush sizes."""
        limit = max(4 * self.max_bytes, 64 << 20)
        if self._active_bytes <= limit:  # the usual case, read without the mutex
            return
        with self._cond:
            while self._active_bytes > limit and self._error is None and not self._closing:
                self._kick.notify()
                self._cond.wait(0.1)

    def flush(self) -> None:
        """Write and fsync everything appended so far."""
        self.wait_durable(self.end)

    # ---- flusher ---------------------------------------------------------------------
    def _take_locked(self) -> list[Chunk]:
        """Swap the buffers: the full one becomes the one being flushed (caller holds cond)."""
        batch = self._active
        self._flushing = batch
        self._active = []
        self._active_bytes = 0
        self._active_count = 0
        self._in_flush = True
        return batch

    def _flush_batch(self, batch: list[Chunk]) -> bool:
        """Write + fsync a taken batch outside the lock; False if the write failed.

        Somebody waiting for durability (sync mode, flush, checkpoint, close) gets the fsync
        right here; the async policy's periodic fsync goes to the syncer thread instead."""
        sync_now = self.sync_mode or self._waiters > 0 or self._closing
        size = sum(c.size for c in batch)
        sync_behind = not sync_now and (
            time.monotonic() - self._last_fsync >= self.fsync_interval
            or self.written_end + size - max(self.durable_end, self._sync_asked) >= self.fsync_bytes
        )
        try:
            if batch:
                self._write(batch, sync_now)
            elif self._write_fd is not None:
                os.fsync(self._write_fd)
                self.stats["fsyncs"] += 1
                sync_now = True
        except OSError as exc:
            self._fail(exc)
            return False
        except BaseException:  # interrupted (KeyboardInterrupt): as a failed write, which
            self._fail(OSError(errno.EINTR, "the write of the log was interrupted"))
            raise  # ``_write`` cut back; the next append recovers in place
        end = batch[-1].pos + batch[-1].size if batch else self.written_end
        if sync_now or sync_behind:
            self._last_fsync = time.monotonic()
        if sync_behind and batch:
            self._sync_later(end)
        with self._cond:
            self.written_end = end
            if sync_now:
                self.durable_end = max(self.durable_end, end)
            self._flushing = []
            self._in_flush = False
            self.stats["flushes"] += 1
            self._cond.notify_all()
            if self._closing or self._should_flush_locked():
                self._kick.notify()
        return True

    def _fail(self, exc: OSError, writer: bool = True) -> None:
        """Keep a failed write's or fsync's error; appends and waiters see it from now on.
        The syncer (``writer=False``: a periodic fsync of the async policy, whose batches
        were acknowledged already and stay) leaves a write in progress to its writer."""
        err = (
            DiskFull(f"commit log write failed: {exc}")
            if exc.errno in NO_SPACE_ERRNOS
            else Unavailable(f"commit log write failed: {exc}")
        )
        with self._cond:
            self._error = err
            if writer:
                self._in_flush = False
            self._wake_all_locked()

    def _sync_later(self, end: int) -> None:
        """(Flusher, after writing up to ``end``.) Hand the fsync to the syncer thread on a
        descriptor of its own; a newer request replaces an older one (it covers it: a segment
        that was left behind got its fsync when the flusher moved on)."""
        assert self._write_fd is not None  # called after a batch was written
        fd = os.dup(self._write_fd)
        with self._cond:
            old, self._sync_request = self._sync_request, (fd, end)
            self._sync_asked = max(self._sync_asked, end)
            self._sync_cond.notify()
        if old is not None:
            os.close(old[0])

    def _sync_loop(self) -> None:
        """Background fsyncs of the async policy (see ``_sync_later``)."""
        while True:
            with self._cond:
                while self._sync_request is None:
                    if self._closing or self._error is not None:
                        return
                    self._sync_cond.wait(0.5)
                fd, end = self._sync_request
                self._sync_request = None
            try:
                os.fsync(fd)
            except OSError as exc:
                self._fail(exc, writer=False)
                return
            finally:
                os.close(fd)
            with self._cond:
                self.durable_end = max(self.durable_end, end)
                self.stats["fsyncs"] += 1
                self._cond.notify_all()

    def _flush_loop(self) -> None:
        """Background flushes: async thresholds, and whatever a closing log still holds."""
        while True:
            with self._cond:
                while self._in_flush or not self._should_flush_locked():
                    if self._closing and not self._active and not self._in_flush:
                        return
                    if self._error is not None:
                        return
                    timeout = 0.5
                    if self._active and not self.sync_mode:
                        timeout = max(0.001, self.max_age - (time.monotonic() - self._active_since))
                    elif self._active:
                        timeout = self.max_age
                    self._kick.wait(timeout)
                batch = self._take_locked()
            if not self._flush_batch(batch):
                return

    def _write(self, batch: list[Chunk], sync_now: bool = True) -> None:
        """Write and fsync ``batch``; on failure cut every touched file back to where it was,
        so no record of a batch that was refused (e.g. disk full) survives into recovery."""
        touched: list[tuple[int, int]] = []
        try:
            self._write_chunks(batch, touched, sync_now)
        except BaseException:  # OSError, or an interruption: the batch is answered failed
            for fd_seg, size in touched:
                path = os.path.join(self.dirs["unsealed"], segment_name(fd_seg))
                try:
                    os.truncate(path, size)
                except OSError:
                    pass  # recovery still truncates a torn tail at the last whole record
            raise

    def _write_chunks(
        self,
        batch: list[Chunk],
        touched: list[tuple[int, int]],
        sync_now: bool = True,
    ) -> None:
        fd = self._write_fd
        i = 0
        while i < len(batch):
            seg = batch[i].seg
            j = i
            bufs: list[Piece] = []
            want = 0
            while j < len(batch) and batch[j].seg == seg and len(bufs) < IOV_MAX:
                c = batch[j]
                if isinstance(c.data, list):
                    bufs.extend(c.data)
                else:
                    bufs.append(c.data)
                want += c.size
                j += 1
            if fd is None or seg != self._write_seg:
                fd = self._open_for_write(seg)
            if not touched or touched[-1][0] != seg:
                touched.append((seg, os.fstat(fd).st_size))
            for k in range(0, len(bufs), IOV_MAX):
                group = bufs[k : k + IOV_MAX]
                step = sum(map(len, group))
                done = os.writev(fd, group)
                if done != step:
                    write_all(fd, b"".join(group)[done:])
            if not sync_now:  # the device starts now; the coming fsync finds little to do
                start_writeback(fd, batch[i].pos - seg, want)
            self.stats["bytes_written"] += want
            i = j
        if sync_now and fd is not None:
            os.fsync(fd)
            self.stats["fsyncs"] += 1

    def _open_for_write(self, seg: int) -> int:
        if self._write_fd is not None:
            os.fsync(self._write_fd)
            os.close(self._write_fd)
        path = os.path.join(self.dirs["unsealed"], segment_name(seg))
        self._write_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(self.dirs["unsealed"])
        self._write_seg = seg
        return self._write_fd

    # ---- replication: raw frames in and out (see storage_node/replication) ------------
    def read_raw(self, pos: int, max_bytes: int) -> tuple[int, bytes]:
        """Durable log bytes from ``pos`` on, within one segment and at most ``max_bytes``
        (a frame boundary must be given; the caller cuts at whole batches): (segment start,
        bytes). Empty when ``pos`` is the durable end; OffsetOutOfRange outside the log."""
        durable = self.durable_end
        if pos < self.start_pos or pos > durable:
            raise OffsetOutOfRange(f"log position {pos} is not held (durable end {durable})")
        if pos == durable:
            return pos, b""
        i = bisect.bisect_right(self.starts, pos) - 1
        if i < 0:
            raise OffsetOutOfRange(f"log position {pos} is not held")
        start = self.starts[i]
        seg = self.segments.get(start)
        if seg is None:  # expired or swapped meanwhile
            return self.read_raw(pos, max_bytes)
        end = min(durable, self.segment_end(start), pos + max_bytes)
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
            return self.read_raw(pos, max_bytes)  # compacted or expired meanwhile
        return start, data

    def append_raw(self, data: bytes, pos: int, seg: int, count: int) -> None:
        """(A follower, append lock held.) Queue ``data``, whole checked frames copied from
        the leader's log, at exactly ``pos`` in the leader's segment ``seg``: the copy keeps
        the leader's positions and segment boundaries byte for byte."""
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

    def restart_at(self, pos: int) -> None:
        """(An empty follower log.) Begin at ``pos``: the leader no longer holds anything
        before it (expired), so the copy starts there."""
        if self.starts or self.end:
            raise InvalidArgument("only an empty log can start at another position")
        self.end = self.written_end = self.durable_end = self.start_pos = pos
        self.fill_seg = pos
        self.fill_bytes = 0

    # ---- reads -----------------------------------------------------------------------
    def _cached(self, pos: int) -> tuple[bytes, int] | None:
        with self._cond:
            if pos < self.written_end:
                return None
            chunks = self._flushing + self._active
        i = bisect.bisect_right([c.pos for c in chunks], pos) - 1
        if i < 0 or pos >= chunks[i].pos + chunks[i].size:
            raise OffsetOutOfRange(f"log position {pos} is beyond the end of the log")
        return chunks[i].contiguous(), pos - chunks[i].pos

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
            starts = self.starts
            i = bisect.bisect_right(starts, pos) - 1
            if i < 0:
                raise OffsetOutOfRange(f"log position {pos} is not held")
            seg = self.segments.get(starts[i])
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
        starts = self.starts
        i = bisect.bisect_right(starts, pos) - 1
        if i < 0:
            raise OffsetOutOfRange(f"log position {pos} is not held")
        seg = self.segments.get(starts[i])
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

    def read_segment(self, start: int) -> bytes:
        """The raw bytes of the segment that starts at ``start`` (decompressed, every block
        checked; CorruptData for a segment that failed its checks)."""
        return self.segments[start].read_all()

    def read_frames(self, pos: int, max_bytes: int) -> bytes:
        """Whole, checked frames from ``pos`` (a frame boundary) on, up to ``max_bytes`` (at
        least one frame) and never past the end of ``pos``'s segment or compressed block:
        the log's bytes as they are, for shipping to another log. ``b""`` at the end."""
        if pos == self.end:
            return b""
        if pos < self.start_pos or pos > self.end:
            raise OffsetOutOfRange(f"log position {pos} is not held")
        hit = self._cached(pos)
        if hit is not None:
            buf, off = hit
            where = "in the write cache"
        else:
            i = bisect.bisect_right(self.starts, pos) - 1
            seg = self.segments[self.starts[i]]
            where = f"{seg.state} segment {segment_name(seg.start)}"
            if isinstance(seg, RawSegment):
                buf, off = seg.frames_at(pos - seg.start, max_bytes), 0
            else:  # a compressed block holds whole frames
                buf, off = seg.record_view(pos - seg.start)
        end = off
        for frame_off, size in iter_frames(buf, off):
            if frame_off != end or (end > off and frame_off + size - off > max_bytes):
                break
            end = frame_off + size
        if end == off:
            verified_frame(buf, off, f"at log position {pos} ({where})")  # raises CorruptData
        return bytes(buf[off:end])

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
            fsync_dir(self.dirs["unsealed"])
            self._frames = []
            self.set_end(pos)
            self._sync_asked = min(self._sync_asked, pos)
        return removed

    def cached_frame(self, pos: int) -> tuple[int, memoryview] | None:
        """A recently read, already checked frame holding ``pos`` (start, frame), if any."""
        for start, end, frame in reversed(self._frames):
            if start <= pos < end:
                return start, frame
        return None

    def keep_frame(self, start: int, frame: memoryview) -> None:
        """Remember a checked frame for the next read (a tailing consumer reads it again)."""
        self._frames = [*self._frames[-(FRAME_CACHE - 1) :], (start, start + len(frame), frame)]

    def is_sealed(self, start: int) -> bool:
        """A segment is sealed once appends moved past it and its bytes are durable."""
        seg = self.segments.get(start)
        if seg is None or start == self.fill_seg:
            return False
        i = self.starts.index(start)
        nxt = self.starts[i + 1] if i + 1 < len(self.starts) else self.end
        return nxt <= self.durable_end

    def segment_end(self, start: int) -> int:
        i = self.starts.index(start)
        return self.starts[i + 1] if i + 1 < len(self.starts) else self.end

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._wake_all_locked()
        if self._thread is not None:
            self._thread.join()
        if self._syncer is not None:
            self._syncer.join()
        if self._sync_request is not None:  # left by the flusher's last step: fsynced below
            os.close(self._sync_request[0])
            self._sync_request = None
        if self._write_fd is not None:
            try:
                os.fsync(self._write_fd)
            finally:
                os.close(self._write_fd)
                self._write_fd = None
        for seg in list(self.segments.values()) + [h for _t, h in self.retired]:
            seg.close()

    def reap_retired(self, grace_s: float = 60.0) -> None:
        """Close handles replaced long enough ago that no reader can still be using them."""
        cutoff = time.monotonic() - grace_s
        with self._cond:
            old = [h for t, h in self.retired if t < cutoff]
            self.retired = [(t, h) for t, h in self.retired if t >= cutoff]
        for h in old:
            h.close()
