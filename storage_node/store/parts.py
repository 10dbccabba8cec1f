"""The parts a store rebuilds from disk: the commit log, the derived indexes, their workers.

At open, and again after a failed write (e.g. disk full), these are built afresh and filled
by recovery (``recovery.LogLoader``), as after a crash: the refused flush was cut back, so
the log on disk holds exactly the batches that were written, and a recovery from the last
checkpoint puts every index back in line with it. What outlives a rebuild (topics, consumer
offsets, the object store, counters, locks and the store's hooks) is handed in as ``Shared``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from storage_node.backend.objectstore import ObjectStore
from storage_node.errors import MsgStoreError
from storage_node.formats.checkpoint import Checkpoint
from storage_node.formats.filenames import (
    COMMITLOG_DIR,
    KEY_INDEX_DIR,
    MSGID_DIR,
    PRODUCERS,
    QUEUES_DIR,
)
from storage_node.store.append_pass import AppendPass
from storage_node.store.checkpointer import Checkpointer
from storage_node.store.commitlog import CommitLog
from storage_node.store.config import StoreConfig
from storage_node.store.dedup import DedupTable
from storage_node.store.indexer import Indexer
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.lifecycle import Lifecycle
from storage_node.store.msg_id_index import MsgIdIndexes
from storage_node.store.offsets import OffsetStore
from storage_node.store.queues import PartitionQueues
from storage_node.store.reads import Reads
from storage_node.store.recovery import LogLoader
from storage_node.store.stats import count, count_error
from storage_node.store.topics import TopicRegistry


@dataclass(frozen=True)
class Shared:
    """What every build of the parts is handed: the store's lasting state and its hooks."""

    config: StoreConfig
    root: str
    checkpoint_path: str
    topics: TopicRegistry
    objects: ObjectStore
    counters: dict
    node_ip: int
    maint_lock: threading.Lock  # one compaction/upload/expiry at a time
    check_open: Callable[[], None]
    checkpoint: Callable[[], Checkpoint]  # a checkpoint of the store (not a clean one)
    saved_checkpoint: Callable[[], Checkpoint | None]
    sync_pool: Callable[[], concurrent.futures.ThreadPoolExecutor]
    purge_deleted: Callable[[], list[str]]  # leftovers of deleted topics (topic_admin.py)
    offsets: OffsetStore  # takes the offset commits a replicated log holds as records


class Parts:
    """One build of the rebuildable parts; ``load`` fills them from disk."""

    def __init__(self, shared: Shared, last_store_ms: int = 0) -> None:
        self.shared = s = shared
        config, root = s.config, s.root
        self.log = CommitLog(
            os.path.join(root, COMMITLOG_DIR),
            config.segment_bytes,
            config.flush_mode,
            config.flush_max_messages,
            config.flush_max_bytes,
            config.flush_max_age_ms,
            config.async_fsync_interval_ms,
            config.async_fsync_bytes,
        )
        self.keyidx = KeyIndexSet(
            os.path.join(root, KEY_INDEX_DIR), config.index_slots, config.index_items
        )
        self.msgids = MsgIdIndexes(os.path.join(root, MSGID_DIR))
        self.queues = PartitionQueues(os.path.join(root, QUEUES_DIR), config.queue_file_entries)
        self.dedup = DedupTable(os.path.join(root, PRODUCERS))
        self.appender = AppendPass(
            self.log,
            self.queues,
            self.keyidx,
            self.msgids,
            self.dedup,
            s.counters,
            s.node_ip,
            config.max_message_bytes,
            s.check_open,
            last_store_ms,
            topics=s.topics,
        )
        self.reads = Reads(
            self.log, s.topics, self.queues, self.keyidx, self.msgids, s.counters, s.check_open
        )
        self.checkpointer = Checkpointer(
            s.checkpoint_path,
            self.log,
            self.keyidx,
            self.msgids,
            self.queues,
            self.dedup,
            s.sync_pool,
        )
        self.lifecycle = Lifecycle(
            config,
            self.log,
            self.keyidx,
            self.msgids,
            self.queues,
            s.topics,
            s.objects,
            s.counters,
            s.maint_lock,
            s.checkpoint,
            s.saved_checkpoint,
            lambda: self.appender.last_store_ms,
        )
        self.recovery_report: dict = {}

    def _loader(self) -> LogLoader:
        """A loader handed these parts (recovery at open, or indexing copied frames)."""
        s = self.shared
        return LogLoader(
            s.root,
            s.checkpoint_path,
            self.log,
            self.keyidx,
            self.msgids,
            self.queues,
            self.dedup,
            s.topics,
            s.objects,
            s.offsets,
        )

    def load(self) -> None:
        """Recover the parts from disk (see recovery.py), remove what deleted topics left
        (the store serves from these parts already), and start the log."""
        s = self.shared
        loaded = self._loader().load()
        self.appender.last_store_ms = max(self.appender.last_store_ms, loaded.last_store_ms)
        self.recovery_report = loaded.report.as_dict()
        self.recovery_report["deleted_topics_purged"] = s.purge_deleted()
        self.log.start()

    def index_copied(self, data: bytes, pos: int) -> None:
        """(A follower, append lock held.) Index frames copied from a leader's log at
        ``pos`` as ``load`` replays them (storage_node/replication)."""
        s = self.shared
        indexer = Indexer(self.queues, self.keyidx, self.msgids, self.dedup, s.topics, s.offsets)
        indexer.index_copied(data, pos)
        self.appender.last_store_ms = max(self.appender.last_store_ms, indexer.last_store_ms)
        if indexer.unparsed_msg_ids:  # (logged by the indexer)
            count(s.counters, "unparsed_msg_ids", indexer.unparsed_msg_ids)

    def set_node_ip(self, ip: int) -> None:
        """(Append lock held.) Hand out message IDs with ``ip`` (a replicated log's, whichever
        node leads it), numbered after every ID indexed meanwhile; kept by rebuilds."""
        self.shared = dataclasses.replace(self.shared, node_ip=ip)
        self.appender.node_ip = ip
        self.appender.node_iphex = f"{ip:08x}"
        self.msgids.forget_assigned()

    def rebuilt(self) -> Parts:
        """After a failed write: these parts closed (whatever they still say) and new ones
        in their place, not loaded yet (``reload``). Store times never go back."""
        for part in (self.log, self.keyidx, self.msgids, self.queues):
            try:
                part.close()
            except OSError:
                pass
        return Parts(self.shared, self.appender.last_store_ms)

    def reload(self, error: MsgStoreError) -> None:
        """``load`` after ``error`` stopped the old parts. If recovery fails too (still no
        room), appends keep being refused and the error is raised again, with the new one:
        the next append retries."""
        try:
            self.load()
        except OSError as exc:
            self.log.refuse_appends(error)
            raise type(error)(f"{error.message}; still failing: {exc}") from exc

    def prepare_spare(self) -> None:
        """The next key-index file, made before an append needs it (see KeyIndexSet). A
        failure (no room) costs only that: the append that needs a file makes its own and
        reports its error."""
        try:
            self.keyidx.prepare_spare()
        except OSError as exc:
            count_error(self.shared.counters, "spare", str(exc))

    def close(self) -> None:
        self.log.close()
        self.keyidx.close()
        self.msgids.close()
        self.queues.close()
