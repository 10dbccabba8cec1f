"""Checkpoints: every derived index made durable up to one log position, and that recorded.

Recovery replays the log from the last checkpoint (``recovery.py``), so a checkpoint first
notes, with the append lock held, where the log ends and where each index stands (queue
next offsets, the active key-index file and its item count, the idempotency table), then
syncs the index files on a small thread pool while the log's own fsync runs, and only then
writes the checkpoint file (atomically).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable

from storage_node.formats.checkpoint import Checkpoint
from storage_node.store.commitlog import CommitLog
from storage_node.store.dedup import DedupTable
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.msg_id_index import MsgIdIndexes
from storage_node.store.queues import PartitionQueues


class Checkpointer:
    def __init__(
        self,
        path: str,
        log: CommitLog,
        keyidx: KeyIndexSet,
        msgids: MsgIdIndexes,
        queues: PartitionQueues,
        dedup: DedupTable,
        sync_pool: Callable[[], concurrent.futures.Executor],
    ) -> None:
        self.path = path
        self.log = log
        self.keyidx = keyidx
        self.msgids = msgids
        self.queues = queues
        self.dedup = dedup
        self.sync_pool = sync_pool

    def take(self, clean: bool, append_lock: threading.RLock, last_store_ms: int) -> Checkpoint:
        """Note the positions under ``append_lock``, make them durable, save the file."""
        with append_lock:
            active = self.keyidx.active
            ck = Checkpoint(
                log_end=self.log.end,
                clean=False,
                key_index_name=active.name if active is not None else None,
                key_index_count=active.count if active is not None else 1,
                queues=self.queues.next_offsets(),
                last_store_ms=last_store_ms,
            )
            dedup = self.dedup.snapshot()
        # the index files are synced alongside the log's fsync, not after it
        syncs = [self.keyidx.sync, self.msgids.sync, *(q.sync for q in self.queues.values())]
        pool = self.sync_pool()
        pending = [pool.submit(sync) for sync in syncs]
        self.log.wait_durable(ck.log_end)
        for future in pending:
            future.result()
        self.dedup.save(dedup)
        ck.clean = clean
        ck.save(self.path)
        return ck
