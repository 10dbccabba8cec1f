"""The commit log's shared state: positions, segments, one mutex and its wait queues.

The commit log is one object built in layers, one module each, every layer adding methods to
the one below: this state and the segment bookkeeping (``LogState``), the write cache
(``write_cache.WriteCache``), the flusher and syncer threads (``log_flusher.LogFlusher``), and
reads and log shipping (``commitlog.CommitLog``). They share one mutex and one set of
positions (end, written, durable) that every layer reads on its hot path, so the layers are
classes of one object rather than objects calling each other.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from storage_node.backend.files import ensure_dir
from storage_node.errors import MsgStoreError
from storage_node.formats.filenames import FOLDERS, State, segment_name
from storage_node.formats.record import Piece
from storage_node.store.segment_readers import RawSegment, SegmentHandle

FRAME_CACHE = 16  # verified frames kept for reads


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


class LogState:
    """The positions, segments and buffers every layer of the commit log works on."""

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
        self.dirs: dict[str, str] = {s: ensure_dir(os.path.join(root, s)) for s in FOLDERS}
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
        self.written_end = 0  # bytes below this are in files and their flush finished
        # bytes below this are in files, their fsync perhaps still running: what a
        # replicated log ships before its own fsync ends (docs/REPLICATION.md)
        self.shippable_end = 0
        self.durable_end = 0  # bytes below this are fsynced
        # called (on the writing thread, no lock held) once bytes reached the files, before
        # their fsync: a replicated leader wakes its followers' fetches with it
        self.on_written: Callable[[], None] | None = None
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
        self.stats = {"flushes": 0, "fsyncs": 0, "bytes_written": 0, "on_written_errors": 0}
        # recently read frames, already CRC-checked: consecutive reads of a partition find
        # their records in the same few frames. Replaced, never changed in place, so
        # readers on other threads can walk the list they got.
        self._frames: list[tuple[int, int, memoryview]] = []

    @property
    def error(self) -> MsgStoreError | None:
        """The failed write's error that stops appends until the store recovers in place."""
        return self._error

    @property
    def in_flush(self) -> bool:
        """A write of the cache is in progress (by the flusher or a leader)."""
        return self._in_flush

    # ---- segments (recovery, lifecycle) -----------------------------------------------
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
        self.end = self.written_end = self.shippable_end = self.durable_end = end
        if self.starts and isinstance(self.segments[self.starts[-1]], RawSegment):
            self.fill_seg = self.starts[-1]
            self.fill_bytes = end - self.fill_seg
        else:
            self.fill_seg = end
            self.fill_bytes = 0
        self.start_pos = self.starts[0] if self.starts else end

    def _wake_all_locked(self) -> None:
        """(Mutex held.) Closing or failing: every waiting thread looks again."""
        self._cond.notify_all()
        self._kick.notify_all()
        self._sync_cond.notify_all()

    def _register_segment(self, seg: int) -> None:
        if seg not in self.segments:
            self.segments[seg] = RawSegment(
                seg, os.path.join(self.dirs[State.UNSEALED], segment_name(seg))
            )
            bisect.insort(self.starts, seg)

    def _roll_locked(self) -> None:
        self.fill_seg = self.end
        self.fill_bytes = 0

    def roll(self) -> None:
        """Start a new segment at the next append (seal the current one)."""
        if self.fill_bytes > 0:
            self._roll_locked()

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

    def reap_retired(self, grace_s: float = 60.0) -> None:
        """Close handles replaced long enough ago that no reader can still be using them."""
        cutoff = time.monotonic() - grace_s
        with self._cond:
            old = [h for t, h in self.retired if t < cutoff]
            self.retired = [(t, h) for t, h in self.retired if t >= cutoff]
        for h in old:
            h.close()
