"""The commit-log surface of a store that replication uses: its ends, shipping whole
batches, a subscription to written bytes, and the few log operations of a leader or a
follower copy. A mixin of ``Store`` so that nothing outside ``store/`` reaches the log."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from storage_node.errors import InvalidArgument
from storage_node.formats.filenames import CHECKPOINT, PRODUCERS
from storage_node.store.types import LogEnds

if TYPE_CHECKING:
    from storage_node.formats.checkpoint import Checkpoint
    from storage_node.store.commitlog import CommitLog
    from storage_node.store.parts import Parts

# what recovery would trust instead of replaying the log: removed by a truncation
DERIVED_STATE = (CHECKPOINT, PRODUCERS)


class LogSurface:
    log: CommitLog
    parts: Parts
    root: str
    saved_checkpoint: Checkpoint | None
    _written_hook: Callable[[], None] | None
    _lock: threading.RLock
    _ckpt_lock: threading.Lock

    if TYPE_CHECKING:  # Store's own

        def _use(self, parts: Parts) -> None: ...

        def checkpoint(self, clean: bool = False) -> Checkpoint: ...

    def truncate_to(self, pos: int) -> bool:
        """(A follower copy, KIP-101.) Cut the log back to ``pos`` (a batch end) and rebuild
        every index from the log that is left, as recovery after a crash does; False, and
        nothing changed, when ``pos`` lies in a sealed (compacted or uploaded) segment."""
        with self._ckpt_lock, self._lock:
            try:
                self.log.truncate_to(pos)
            except InvalidArgument:
                if pos < self.log.start_pos or self.log.end <= pos:
                    raise
                return False
            for name in DERIVED_STATE:
                try:
                    os.remove(os.path.join(self.root, name))
                except FileNotFoundError:
                    pass
            self.saved_checkpoint = None
            self._use(self.parts.rebuilt())
            self.parts.load()
        self.checkpoint(clean=False)
        return True

    def log_ends(self) -> LogEnds:
        """Where the commit log starts and ends now (written, shippable, durable)."""
        log = self.log
        return LogEnds(
            start=log.start_pos,
            end=log.end,
            shippable_end=log.shippable_end,
            durable_end=log.durable_end,
            sync_mode=log.sync_mode,
            failed=log.error is not None,
        )

    def read_frames(self, pos: int, max_bytes: int) -> tuple[int, bytes]:
        """(A leader shipping this log.) Whole batches from ``pos`` in one segment, only
        bytes already in files: (segment start, bytes); empty at the shippable end."""
        return self.log.read_frames(pos, max_bytes)

    def subscribe_written(self, hook: Callable[[], None] | None) -> None:
        """Call ``hook`` (from the flusher thread) each time bytes reach the log files, before
        their fsync ends; None unsubscribes. Kept across an in-place recovery."""
        self._written_hook = hook
        self.log.on_written = hook

    def flush_log(self) -> None:
        """Write and fsync everything appended so far."""
        self.log.flush()

    def restart_log_at(self, pos: int) -> None:
        """(An empty follower copy, just opened.) Begin the log at ``pos``: nothing before it
        exists on the leader any more."""
        self.log.restart_at(pos)
