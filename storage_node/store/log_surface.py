"""The commit-log surface of a store that replication uses: its ends, shipping whole
batches, a subscription to written bytes, and the few log operations of a leader or a
follower copy. A mixin of ``Store`` so that nothing outside ``store/`` reaches the log."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from storage_node.store.types import LogEnds

if TYPE_CHECKING:
    from storage_node.store.commitlog import CommitLog


class LogSurface:
    log: CommitLog
    _written_hook: Callable[[], None] | None

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
