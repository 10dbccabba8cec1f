"""The store: one node's topics, appends, reads, offsets and checkpoints, as a façade.

It wires parts that each have a module: ``parts.Parts`` is what is rebuilt from disk at open
and after a failed write (the commit log, the derived indexes, the idempotency table, and
``AppendPass``, ``Reads``, ``Checkpointer``, ``Lifecycle`` working on them, filled by
``recovery.LogLoader``); ``appends.Appends`` the append entry points, queueing into
``group_commit.GroupCommit``; ``consumer_groups``, ``topics``, ``maintenance`` (the background
thread) and ``stats``. The parts are handed what they work on and never see the Store. Each
public method keeps its contract here (docs/ENGINE_API.md) and the work is in the parts,
but for the append entry points (``append``, ``append_columns``, ``append_packed`` and their
``submit*`` forms), which are the ``Appends`` part's own methods with their contracts there.
Over 400 lines on purpose: the façade is the one list of the engine's public operations.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from storage_node.backend.files import ensure_dir
from storage_node.backend.objectstore import ObjectStore, open_object_store
from storage_node.errors import Unavailable
from storage_node.formats.checkpoint import Checkpoint
from storage_node.formats.filenames import CHECKPOINT, OBJECTS_DIR, OFFSETS_DIR, TOPICS
from storage_node.formats.message_id import ip_to_int
from storage_node.formats.queue_index import QueueIndex
from storage_node.store.appends import Appends
from storage_node.store.columnar import SpanMemo
from storage_node.store.config import StoreConfig
from storage_node.store.consumer_groups import ConsumerGroups
from storage_node.store.directory_lock import DirectoryLock
from storage_node.store.group_commit import GroupCommit
from storage_node.store.log_surface import LogSurface
from storage_node.store.maintenance import Maintenance
from storage_node.store.offsets import DELETED, OffsetStore, commit_frames
from storage_node.store.parts import Parts, Shared
from storage_node.store.pools import LazyPool
from storage_node.store.read_batch import ReadBatch
from storage_node.store.reads import MAX_LOOKUP, MAX_READ_MESSAGES
from storage_node.store.stats import count, describe, new_counters
from storage_node.store.topic_admin import TopicAdmin
from storage_node.store.topics import TopicRegistry
from storage_node.store.types import (
    FileInfo,
    LookupResult,
    Message,
    ReadResult,
    TopicConfig,
)

__all__ = ["MAX_LOOKUP", "MAX_READ_MESSAGES", "Store"]


class Store(LogSurface):
    """One node's segment store. Thread-safe; open with ``Store.open(config)``."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config.validate()
        # A configured object store is opened first: a bad URL fails before touching disk.
        configured = open_object_store(config.object_store_url) if config.object_store_url else None
        root = self.root = os.path.abspath(config.data_dir)
        ensure_dir(root)
        self._dir_lock = DirectoryLock(root)
        self.ready = False
        self._closed = False
        self._written_hook: Callable[[], None] | None = None  # subscribe_written
        self._lock = threading.RLock()  # the append lock
        self._ckpt_lock = threading.Lock()
        self.checkpoint_path = os.path.join(root, CHECKPOINT)
        self.topics = TopicRegistry(os.path.join(root, TOPICS))
        self.offsets = OffsetStore(os.path.join(root, OFFSETS_DIR))
        self.objects: ObjectStore = configured or open_object_store(os.path.join(root, OBJECTS_DIR))
        self.node_ip = ip_to_int(config.node_ip)
        self.counters = new_counters()
        self.saved_checkpoint: Checkpoint | None = None  # the last one on disk
        self.admin = TopicAdmin(
            self.topics,
            self.offsets,
            lambda: self.queues,
            lambda: self.log,
            self._lock,
            self._ckpt_lock,
            lambda: self.checkpoint(clean=False),
        )
        self.recovery_seconds = 0.0  # how long ``open`` took to recover (metrics)
        self._syncer = LazyPool(4, "msgstore-sync")  # fsyncs of index files (checkpoints)
        self._use(
            Parts(
                Shared(
                    self.config,
                    root,
                    self.checkpoint_path,
                    self.topics,
                    self.objects,
                    self.counters,
                    self.node_ip,
                    threading.Lock(),
                    self._check_open,
                    lambda: self.checkpoint(clean=False),
                    lambda: self.saved_checkpoint,
                    self._syncer.get,
                    lambda: self.admin.purge_leftovers(),
                    self.offsets,
                )
            )
        )
        self.group_commit = GroupCommit(
            self._lock,
            lambda group: self.appender.write(group),
            lambda end: self.log.wait_durable(end),
            self.log.sync_mode,
        )
        self.appends = Appends(
            self.topics,
            self.group_commit,
            self._check_open,
            self.resume_after_write_error,
            lambda: self.log.backpressure(),
        )
        # The append entry points are the Appends part's own (their contracts are there).
        self.append = self.appends.append
        self.append_columns = self.appends.append_columns
        self.append_packed = self.appends.append_packed
        self.submit = self.appends.submit
        self.submit_columns = self.appends.submit_columns
        self.submit_packed = self.appends.submit_packed
        self.groups = ConsumerGroups(
            self.offsets, self.topics, lambda t, p: self.reads.partition(t, p), self._check_open
        )
        self.maintenance = Maintenance(
            config.checkpoint_interval_s,
            config.lifecycle_interval_s,
            lambda: self.checkpoint(clean=False),
            lambda: self.lifecycle.run_once(),
            lambda: self.parts.prepare_spare(),
            self.counters,
        )

    def _use(self, parts: Parts) -> None:
        """Serve from ``parts`` (a new build after a failed write)."""
        self.parts = parts
        parts.log.on_written = self._written_hook
        self.log, self.keyidx, self.msgids = parts.log, parts.keyidx, parts.msgids
        self.queues, self.dedup, self.appender = parts.queues, parts.dedup, parts.appender
        self.reads, self.checkpointer = parts.reads, parts.checkpointer
        self.lifecycle = parts.lifecycle

    @property
    def recovery_report(self) -> dict:
        """What the last recovery found and did (see recovery.py)."""
        return self.parts.recovery_report

    @property
    def last_store_ms(self) -> int:
        """The newest store time handed out (store times never go back)."""
        return self.appender.last_store_ms

    def store_time_fence(self) -> int:
        """A store time F such that every message stored before F can be read now and every
        later append is stored at F or after (store times never go back): a reader that has
        read a partition to its end knows no message stored before F is still to come.
        Taken under the append lock, so no append is half done."""
        with self._lock:
            return max(time.time_ns() // 1_000_000, self.appender.last_store_ms)

    def resume_after_write_error(self) -> None:
        """After a failed flush (e.g. disk full): recover in place, as after a crash (see
        parts.py); if that fails too, the error is raised again and the next append retries."""
        if self.log.error is None:
            return
        with self._ckpt_lock, self._lock:
            error = self.log.error
            if error is None:
                return
            self._use(self.parts.rebuilt())
            self.parts.reload(error)
            count(self.counters, "resumed_after_write_error")

    # ---- lifecycle of the object ------------------------------------------------------
    @classmethod
    def open(cls, config: StoreConfig) -> Store:
        """Open (and recover) the store in ``config.data_dir``."""
        store = cls(config)
        started = time.monotonic()
        try:
            store.parts.load()
            store.checkpoint(clean=False)
            store.parts.prepare_spare()
        except BaseException:
            store._release()
            raise
        store.recovery_seconds = time.monotonic() - started
        store.maintenance.start()
        store.ready = True
        return store

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush, checkpoint with the clean-shutdown flag, release everything. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.ready = False
        self.maintenance.stop()
        self.appends.pool.shutdown()
        try:
            if self.log.error is None:
                self.checkpoint(clean=True)
        finally:
            self._release()

    def _release(self) -> None:
        self._syncer.shutdown()
        self.parts.close()
        self._dir_lock.release()

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("store is closed")

    # ---- topics ---------------------------------------------------------------------
    def create_topic(self, config: TopicConfig) -> bool:
        """Create a topic (True), or find it there with the same config (False)."""
        self._check_open()
        return self.admin.create_topic(config)

    def delete_topic(self, name: str) -> TopicConfig:
        """Delete a topic: gone from listings, its records unreachable, its groups' offsets
        dropped; a topic created again under the name starts empty (see topic_admin.py)."""
        self._check_open()
        return self.admin.delete_topic(name)

    def add_partitions(self, name: str, partitions: int) -> TopicConfig:
        """Raise a topic's partition count (only up; see topic_admin.py); the new config."""
        self._check_open()
        return self.admin.add_partitions(name, partitions)

    def get_topic(self, name: str) -> TopicConfig:
        return self.topics.get(name)

    def list_topics(self) -> list[TopicConfig]:
        return self.topics.all()

    def queue(self, topic: str, partition: int, next_offset: int | None = None) -> QueueIndex:
        return self.queues.get(topic, partition, next_offset)

    def partition_offsets(self, topic: str) -> list[tuple[int, int]]:
        """(first offset, next offset) of each partition of ``topic``."""
        return self.reads.partition_offsets(topic)

    def partition_sizes(self, topic: str) -> list[int]:
        """The bytes of the records each partition of ``topic`` holds, from its first to its
        next offset (as written to the log, before file compression)."""
        return self.reads.partition_sizes(topic)

    # ---- replication hooks (storage_node/replication) ---------------------------------
    def append_copied(self, data: bytes, pos: int, seg: int) -> None:
        """(A follower's copy of this log.) Write ``data``, whole batches copied from the
        leader at exactly ``pos`` in its segment ``seg`` (checked first: CorruptData), index
        them as recovery would, and return once they are durable."""
        self._check_open()
        with self._lock:
            self.log.append_frames(data, pos, seg)
            self.parts.index_copied(data, pos)
        self.log.wait_durable(pos + len(data))

    def set_node_ip(self, ip: str) -> None:
        """(A replicated log taking writes here.) Message IDs handed out from now on carry
        ``ip``: a log keeps its IP whichever node leads it."""
        with self._lock:
            self.node_ip = ip_to_int(ip)
            self.parts.set_node_ip(self.node_ip)

    # ---- reads ----------------------------------------------------------------------
    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_messages: int = 100,
        max_bytes: int = 1 << 20,
        tag: str | None = None,
    ) -> ReadResult:
        """Messages from ``offset`` on; at least one if any, then up to the limits (the
        definition, record by record, is at ``Reads.read`` and in docs/ENGINE_API.md)."""
        return self.reads.read(topic, partition, offset, max_messages, max_bytes, tag)

    def read_columns(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_messages: int = 100,
        max_bytes: int = 1 << 20,
        tag: str | None = None,
        memo: SpanMemo | None = None,
    ) -> ReadBatch:
        """``read`` as packed columns (see storage_node/store/columnar.py): the queue-index
        entries of the range as one array, each frame fetched and CRC-checked once, rows
        and fields gathered with numpy. No Python object per message. Reads of one request
        that pass the same ``memo`` share the log bytes fetched (the partitions written
        together lie in the same frames)."""
        return self.reads.read_columns(topic, partition, offset, max_messages, max_bytes, tag, memo)

    def read_column_parts(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_messages: int = 100,
        max_bytes: int = 1 << 20,
        tag: str | None = None,
        memo: SpanMemo | None = None,
    ) -> tuple[list[ReadBatch], int]:
        """``read_columns`` as the batches it is made of and the next offset, not joined
        (a Kafka Fetch sends each as its own record batch)."""
        return self.reads.read_column_parts(
            topic, partition, offset, max_messages, max_bytes, tag, memo
        )

    def lookup_key(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**63 - 1, max_count: int = 32
    ) -> LookupResult:
        """Messages of ``topic`` with exactly ``key`` stored in [begin_ms, end_ms], newest first."""
        return self.reads.lookup_key(topic, key, begin_ms, end_ms, max_count)

    def get_message(self, msg_id: str) -> Message:
        return self.reads.get_message(msg_id)

    def fetch_columns(
        self,
        topic: str,
        offsets: dict[int, int | None],
        max_messages: int = 100,
        max_bytes: int = 1 << 20,
        tag: str | None = None,
    ) -> dict[int, ReadBatch]:
        """``read_columns`` of several partitions at once ({partition: offset}, None = the
        first kept), each with its own limits: a frame holding rows of several of them is
        fetched and checked once (a multi-partition fetch)."""
        return self.reads.fetch_columns(topic, offsets, max_messages, max_bytes, tag)

    def offset_for_timestamp(self, topic: str, partition: int, ts_ms: int) -> int:
        """First offset whose store timestamp is >= ts_ms (next_offset if none): binary search."""
        return self.reads.offset_for_timestamp(topic, partition, ts_ms)

    # ---- consumer offsets (consumer_groups.py) ------------------------------------------
    def commit_offset(
        self, group: str, topic: str, partition: int, offset: int, in_log: bool = False
    ) -> None:
        """Commit a group's offset; ``in_log`` (a replicated log) also writes it into the
        log, durable before this returns, so copies hold it (offsets.py)."""
        self.groups.check(group, topic, partition, offset)
        if in_log:
            now_ms = max(int(time.time() * 1000), self.last_store_ms)
            batch = commit_frames(group, topic, partition, offset, now_ms)
            self.resume_after_write_error()
            with self._lock:
                positions = self.log.append(batch.pieces, batch.frame_sizes)
            self.log.wait_durable(int(positions[-1] + batch.frame_sizes[-1]))
        self.groups.commit(group, topic, partition, offset)

    def delete_offsets(
        self,
        group: str,
        topic: str | None = None,
        partition: int | None = None,
        in_log: bool = False,
    ) -> bool:
        """Forget a group's committed offsets (all, a topic's, or one partition's); whether
        any was there. ``in_log`` as for ``commit_offset``: copies forget them too."""
        self.groups.check_delete(group, topic, partition)
        if not self.groups.offsets.get(group, topic):
            return False
        if in_log:
            now_ms = max(int(time.time() * 1000), self.last_store_ms)
            batch = commit_frames(group, topic, partition, DELETED, now_ms)
            self.resume_after_write_error()
            with self._lock:
                positions = self.log.append(batch.pieces, batch.frame_sizes)
            self.log.wait_durable(int(positions[-1] + batch.frame_sizes[-1]))
        return self.groups.offsets.delete(group, topic, partition)

    def producer_batch(
        self, producer_id: str, sequence: int
    ) -> tuple[bool, tuple[int, int] | None]:
        """What the idempotency table remembers of a producer: whether (producer_id,
        sequence) was appended, and (sequence, record count) of its highest batch (None:
        nothing remembered). The table is part of the log (recovery and copies rebuild it)."""
        table = self.dedup
        return (producer_id, sequence) in table.batches, table.last_batch(producer_id)

    def producer_ids(self) -> list[str]:
        """Every producer id the idempotency table remembers a batch of."""
        return list(self.dedup.last)

    def consumer_groups(self) -> list[str]:
        """Names of the groups with an offset committed on this node."""
        return self.groups.groups()

    def committed_offsets(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        return self.groups.committed(group, topic)

    # ---- checkpoint -------------------------------------------------------------------
    def checkpoint(self, clean: bool = False) -> Checkpoint:
        """Make every index durable up to a log position and record it (see recovery)."""
        with self._ckpt_lock:
            last_ms = self.appender.last_store_ms
            ck = self.checkpointer.take(clean, self._lock, last_ms)
            self.saved_checkpoint = ck
            self.counters["checkpoints"] += 1
            return ck

    # ---- files, lifecycle, remote compaction (lifecycle.py) ----------------------------
    def list_files(self) -> list[FileInfo]:
        return self.lifecycle.list_files()

    def seal_active(self) -> None:
        self._check_open()
        with self._lock:
            self.log.roll()
            self.keyidx.seal_active()
        self.checkpoint(clean=False)

    def compact_now(self) -> dict:
        """Seal the active files and compact everything sealed, whatever its age."""
        self._check_open()
        self.seal_active()
        return self.lifecycle.compact_sealed()

    def run_lifecycle_once(self, now_ms: int | None = None) -> dict:
        self._check_open()
        return self.lifecycle.run_once(now_ms)

    def sealed_files(self) -> list[FileInfo]:
        return self.lifecycle.sealed_files()

    def open_sealed(self, kind: str, name: str) -> bytes:
        self._check_open()
        return self.lifecycle.open_sealed(kind, name)

    def commit_compacted(self, kind: str, name: str, data: bytes, crc32: int) -> FileInfo:
        self._check_open()
        return self.lifecycle.commit_compacted(kind, name, data, crc32)

    def growing_stats(self) -> set[str]:
        """The keys of ``stats()`` that only grow (counters), for exporting as counters."""
        return set(self.counters) | {f"log_{k}" for k in self.log.stats}

    def stats(self) -> dict:
        return describe(
            self.counters,
            self.log,
            self.list_files(),
            len(self.topics.topics),
            self.ready,
            self.recovery_report,
        )
