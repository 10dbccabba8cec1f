"""The commit log's write cache: appends place encoded frames in the active buffer.

Appends (serialised by the store's append lock) place whole frames into the *active* buffer
and decide segment boundaries; a flush takes the buffer whole (``_take_locked``) and the next
appends fill a fresh one (double buffering). Reads of positions not yet in a file are served
from the buffers. The flush itself is the next layer's (``log_flusher``).
"""

from __future__ import annotations

import bisect
import time

import numpy as np

from storage_node.errors import MsgStoreError, OffsetOutOfRange, Unavailable
from storage_node.formats.record import Piece
from storage_node.store.log_state import Chunk, LogState


class WriteCache(LogState):
    """The append path of the commit log (the caller holds the store's append lock)."""

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

    def refuse_appends(self, error: MsgStoreError) -> None:
        """Keep refusing appends with ``error`` (an in-place recovery that failed too: the
        next append tries again)."""
        with self._cond:
            self._error = error
            self._wake_all_locked()

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

    def backpressure(self) -> None:
        """Keep the cache bounded: wait while the unflushed bytes exceed four flush sizes."""
        limit = max(4 * self.max_bytes, 64 << 20)
        if self._active_bytes <= limit:  # the usual case, read without the mutex
            return
        with self._cond:
            while self._active_bytes > limit and self._error is None and not self._closing:
                self._kick.notify()
                self._cond.wait(0.1)

    def _take_locked(self) -> list[Chunk]:
        """Swap the buffers: the full one becomes the one being flushed (caller holds cond)."""
        batch = self._active
        self._flushing = batch
        self._active = []
        self._active_bytes = 0
        self._active_count = 0
        self._in_flush = True
        return batch

    def _cached(self, pos: int) -> tuple[bytes, int] | None:
        with self._cond:
            if pos < self.written_end:
                return None
            chunks = self._flushing + self._active
        i = bisect.bisect_right([c.pos for c in chunks], pos) - 1
        if i < 0 or pos >= chunks[i].pos + chunks[i].size:
            raise OffsetOutOfRange(f"log position {pos} is beyond the end of the log")
        return chunks[i].contiguous(), pos - chunks[i].pos
