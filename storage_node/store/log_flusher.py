"""The commit log's flusher and syncer: the write cache written, fsynced, acknowledged.

A flusher swaps the buffers, writes the full one with one ``writev`` per segment touched,
fsyncs, and wakes the waiters: in ``sync`` mode an append returns after the fsync that covers
it, so every batch that arrived during one fsync shares the next one (group commit); the
store's group-commit leader writes and fsyncs its group itself (``wait_durable``). In
``async`` mode the flusher thread runs when the cache reaches a count, byte or age threshold
(seed 002) and a syncer thread runs the policy's periodic fsyncs.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time

from storage_node.backend.files import fsync_dir, start_writeback, write_all
from storage_node.errors import DiskFull, Unavailable
from storage_node.formats.filenames import State, segment_name
from storage_node.formats.record import Piece
from storage_node.store.log_state import Chunk
from storage_node.store.write_cache import WriteCache

log = logging.getLogger(__name__)
IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX"))  # pieces one gathering write takes
# Out of space: the disk (ENOSPC), a quota (EDQUOT) or the process file-size limit (EFBIG).
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class LogFlusher(WriteCache):
    """Writing the cache: by a waiting leader, the flusher thread or (fsyncs) the syncer."""

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

    def flush(self) -> None:
        """Write and fsync everything appended so far."""
        self.wait_durable(self.end)

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
            self.shippable_end = self.written_end
            for fd_seg, size in touched:
                path = os.path.join(self.dirs[State.UNSEALED], segment_name(fd_seg))
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
            fd = self._write_fd
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
        if batch:
            self.shippable_end = batch[-1].pos + batch[-1].size
            self._tell_written()
        if sync_now and self._write_fd is not None:
            os.fsync(self._write_fd)
            self.stats["fsyncs"] += 1

    def _tell_written(self) -> None:
        """Run the ``on_written`` hook; its failure is not the write's, but it is counted
        (``log_on_written_errors`` in the stats) and logged: the first one and each time the
        count doubles, so a hook failing on every write cannot flood the log."""
        hook = self.on_written
        if hook is not None:
            try:
                hook()
            except Exception:  # noqa: BLE001 - a waker must never fail a write
                failures = self.stats["on_written_errors"] = self.stats["on_written_errors"] + 1
                if failures & (failures - 1) == 0:
                    log.exception("the commit log's on_written hook failed (%d times)", failures)

    def _open_for_write(self, seg: int) -> int:
        if self._write_fd is not None:
            os.fsync(self._write_fd)
            os.close(self._write_fd)
        path = os.path.join(self.dirs[State.UNSEALED], segment_name(seg))
        fd = self._write_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(self.dirs[State.UNSEALED])
        self._write_seg = seg
        return fd

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
