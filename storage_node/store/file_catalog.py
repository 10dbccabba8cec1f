"""What files a store holds, in which lifecycle state, of what size and age.

``FileCatalog`` describes the commit-log segments and key-index files as ``FileInfo``: the
listing of the files API, the stats, and the work lists of compaction, upload and expiry
(lifecycle.py). A segment's age is the store time of its first record and ends where the
next segment begins; only a damaged first record (reported by recovery and reads) or a
segment expired meanwhile leaves it unknown silently. Any other failure is logged and
counted (``segment_age_errors``), since retention keeps a segment of unknown age.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from storage_node.errors import CorruptData, OffsetOutOfRange
from storage_node.formats.filenames import State, segment_name
from storage_node.formats.key_index_file import KeyIndexFile
from storage_node.formats.record import FRAME_SIZE
from storage_node.store.commitlog import CommitLog
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.segment_readers import RawSegment
from storage_node.store.stats import count_error
from storage_node.store.types import FileInfo

logger = logging.getLogger(__name__)


class FileCatalog:
    """Describes the files of one store (see above)."""

    def __init__(
        self,
        log: CommitLog,
        keyidx: KeyIndexSet,
        counters: dict,
        last_store_ms: Callable[[], int],
    ) -> None:
        """``last_store_ms``: the newest store time (the end of the last segment's span)."""
        self.log = log
        self.keyidx = keyidx
        self.counters = counters
        self.last_store_ms = last_store_ms
        self._seg_begin_ms: dict[int, int] = {}

    def _segment_begin_ms(self, start: int) -> int | None:
        cache = self._seg_begin_ms
        if start in cache:
            return cache[start]
        if self.log.segment_end(start) <= start:
            return None
        try:  # a segment starts with a frame: its first record follows the frame header
            value = self.log.read(start + FRAME_SIZE).store_ms
        except (CorruptData, OffsetOutOfRange):
            # damaged (recovery and reads report it) or expired meanwhile: no age to know
            return None
        except Exception as exc:  # noqa: BLE001 - a listing must not fail; retention waits
            # anything else hides a real problem: retention keeps the segment, so say why
            name = segment_name(start)
            logger.exception("the age of segment %s is unknown: its first record failed", name)
            count_error(self.counters, "segment_age", f"segment {name}: {exc!r}")
            return None
        cache[start] = value
        return value

    def _segment_state(self, start: int) -> str:
        handle = self.log.segments[start]
        if isinstance(handle, RawSegment):
            return State.SEALED if self.log.is_sealed(start) else State.UNSEALED
        return handle.state

    def segment_info(self, start: int) -> FileInfo:
        log = self.log
        handle = log.segments[start]
        starts = log.starts
        i = starts.index(start)
        end_ms = self._segment_begin_ms(starts[i + 1]) if i + 1 < len(starts) else None
        if end_ms is None and log.segment_end(start) > start:
            end_ms = self.last_store_ms()
        raw = log.segment_end(start) - start
        stored = handle.stored_size if not isinstance(handle, RawSegment) else raw
        return FileInfo(
            "segment",
            self._segment_state(start),
            segment_name(start),
            raw,
            stored,
            self._segment_begin_ms(start),
            end_ms,
        )

    def key_index_info(self, name: str) -> FileInfo:
        kx = self.keyidx
        h = kx.files[name]
        state = kx.states[name]
        if isinstance(h, KeyIndexFile):
            if h is not kx.active:
                state = State.SEALED
            size = h.items_base + h.count * 20
            try:
                stored = os.stat(h.path).st_blocks * 512
            except FileNotFoundError:
                stored = 0
            return FileInfo("key_index", state, name, size, stored, h.begin_ms, h.end_ms)
        return FileInfo(
            "key_index", state, name, h.stored_size, h.stored_size, h.begin_ms, h.end_ms
        )

    def list_files(self) -> list[FileInfo]:
        log, kx = self.log, self.keyidx
        out = [self.segment_info(s) for s in list(log.starts) if s in log.segments]
        out.extend(self.key_index_info(n) for n in list(kx.names) if n in kx.files)
        return out

    def sealed_files(self) -> list[FileInfo]:
        """Sealed files not yet compacted: the work list of a remote compaction job."""
        return [f for f in self.list_files() if f.state == State.SEALED]
