"""The store: one node's topics, appends, reads, offsets and checkpoints, as a façade.

Each concern is a part with a module of its own, and this class wires them together:

* ``commitlog.CommitLog``        the log and its write cache; the derived indexes
  (``queues.PartitionQueues``, ``key_index_set.KeyIndexSet``, ``msg_id_index.MsgIdIndexes``)
  and the idempotency table (``dedup.DedupTable``);
* ``group_commit.GroupCommit``   producers queue batches; a leader writes them together and
  waits for the one fsync that covers them (``sync``), or not (``async``);
* ``append_pass.AppendPass``     what one group's pass does: check, number, encode, write,
  index;
* ``reads.Reads``                reads by offset (``columnar`` decodes them), by key, by ID, by
  time;
* ``recovery.LogLoader``         recovery at open (and after a failed write), which returns
  its report;
* ``checkpointer.Checkpointer``  the indexes made durable up to a log position, recorded;
* ``lifecycle.Lifecycle``        seal, compact, upload, expire; remote compaction;
* ``maintenance.Maintenance``    the background thread; ``stats`` the counters and stats.

The parts are handed what they work on and never see the Store. After a failed write the
parts are rebuilt from disk (as after a crash), so the Store holds them, not the reverse.

Over 400 lines on purpose: it is the engine's whole public API (docs/ENGINE_API.md), each
method with its contract, plus the wiring of the parts; the work is in the parts.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import os
import threading
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from storage_node.backend.files import ensure_dir
from storage_node.backend.objectstore import ObjectStore, open_object_store
from storage_node.errors import InvalidArgument, InvalidBatch, OffsetOutOfRange, Unavailable
from storage_node.formats.checkpoint import Checkpoint
from storage_node.formats.message_id import ip_to_int
from storage_node.formats.packed import ListBatch, PackedBatch, check_list_shapes
from storage_node.formats.queue_index import QueueIndex
from storage_node.formats.record import MAX_PRODUCER_BYTES
from storage_node.store.append_pass import AppendPass
from storage_node.store.arguments import check_int
from storage_node.store.batches import Ticket, check_batch_size
from storage_node.store.checkpointer import Checkpointer
from storage_node.store.columnar import ReadBatch
from storage_node.store.commitlog import CommitLog
from storage_node.store.config import StoreConfig
from storage_node.store.dedup import DedupTable
from storage_node.store.group_commit import GroupCommit
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.lifecycle import Lifecycle
from storage_node.store.maintenance import Maintenance, count_error
from storage_node.store.msg_id_index import MsgIdIndexes
from storage_node.store.names import check_name
from storage_node.store.offsets import OffsetStore
from storage_node.store.queues import PartitionQueues
from storage_node.store.reads import MAX_LOOKUP, MAX_READ_MESSAGES, Reads
from storage_node.store.recovery import LogLoader
from storage_node.store.stats import describe, new_counters
from storage_node.store.topic_admin import (
    add_partitions,
    clear_leftovers,
    delete_topic,
    purge_leftovers,
)
from storage_node.store.topics import TopicRegistry
from storage_node.store.types import (
    AppendColumns,
    AppendResult,
    FileInfo,
    LookupResult,
    Message,
    MessageIn,
    ReadResult,
    TopicConfig,
)

__all__ = ["MAX_LOOKUP", "MAX_READ_MESSAGES", "Store"]

_FIELDS = attrgetter("value", "key", "tag", "msg_id", "timestamp", "partition")


class Store:
    """One node's segment store. Thread-safe; open with ``Store.open(config)``."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config.validate()
        # A configured object store is opened first: a bad URL fails before touching disk.
        configured = open_object_store(config.object_store_url) if config.object_store_url else None
        root = self.root = os.path.abspath(config.data_dir)
        ensure_dir(root)
        self._lock_fd: int | None = os.open(
            os.path.join(root, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644
        )
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            raise Unavailable(f"data directory is in use by another store: {exc}") from exc
        self.ready = False
        self._closed = False
        self._lock = threading.RLock()  # the append lock
        self._ckpt_lock = threading.Lock()
        self._maint_lock = threading.Lock()  # one compaction/upload/expiry at a time
        self.checkpoint_path = os.path.join(root, "checkpoint")
        self.topics = TopicRegistry(os.path.join(root, "topics.json"))
        self.offsets = OffsetStore(os.path.join(root, "offsets"))
        self.objects: ObjectStore = configured or open_object_store(os.path.join(root, "objects"))
        self.node_ip = ip_to_int(config.node_ip)
        self.counters = new_counters()
        self.recovery_report: dict = {}
        self.saved_checkpoint: Checkpoint | None = None  # the last one on disk
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._syncer: concurrent.futures.ThreadPoolExecutor | None = None
        self._build_parts()
        self.group_commit = GroupCommit(
            self._lock,
            lambda group: self.appender.write(group),
            lambda end: self.log.wait_durable(end),
            self.log.sync_mode,
        )
        self.maintenance = Maintenance(
            config.checkpoint_interval_s,
            config.lifecycle_interval_s,
            lambda: self.checkpoint(clean=False),
            lambda: self.lifecycle.run_once(),
            self._prepare_spare,
            self.counters,
        )

    def _build_parts(self, last_store_ms: int = 0) -> None:
        """The commit log, the derived indexes and the parts working on them: what recovery
        fills in (again after a failed write)."""
        config, root = self.config, self.root
        self.log = CommitLog(
            os.path.join(root, "commitlog"),
            config.segment_bytes,
            config.flush_mode,
            config.flush_max_messages,
            config.flush_max_bytes,
            config.flush_max_age_ms,
            config.async_fsync_interval_ms,
            config.async_fsync_bytes,
        )
        self.keyidx = KeyIndexSet(
            os.path.join(root, "index"), config.index_slots, config.index_items
        )
        self.msgids = MsgIdIndexes(os.path.join(root, "msgid"))
        self.queues = PartitionQueues(os.path.join(root, "queues"), config.queue_file_entries)
        self.dedup = DedupTable(os.path.join(root, "producers.json"))
        self.appender = AppendPass(
            self.log,
            self.queues,
            self.keyidx,
            self.msgids,
            self.dedup,
            self.counters,
            self.node_ip,
            config.max_message_bytes,
            self._check_open,
            last_store_ms,
            topics=self.topics,
        )
        self.reads = Reads(
            self.log,
            self.topics,
            self.queues,
            self.keyidx,
            self.msgids,
            self.counters,
            self._check_open,
        )
        self.checkpointer = Checkpointer(
            self.checkpoint_path,
            self.log,
            self.keyidx,
            self.msgids,
            self.queues,
            self.dedup,
            self._sync_pool,
        )
        self.lifecycle = Lifecycle(
            config,
            self.log,
            self.keyidx,
            self.msgids,
            self.queues,
            self.topics,
            self.objects,
            self.counters,
            self._maint_lock,
            lambda: self.checkpoint(clean=False),
            lambda: self.saved_checkpoint,
            lambda: self.appender.last_store_ms,
        )

    def _load(self) -> None:
        """Recover the parts from disk (see recovery.py) and start the log."""
        loaded = LogLoader(
            self.root,
            self.checkpoint_path,
            self.log,
            self.keyidx,
            self.msgids,
            self.queues,
            self.dedup,
            self.topics,
            self.objects,
        ).load()
        self.appender.last_store_ms = max(self.appender.last_store_ms, loaded.last_store_ms)
        self.recovery_report = loaded.report.as_dict()
        self.recovery_report["deleted_topics_purged"] = purge_leftovers(self)
        self.log.start()

    @property
    def last_store_ms(self) -> int:
        """The newest store time handed out (store times never go back)."""
        return self.appender.last_store_ms

    def _resume_after_write_error(self) -> None:
        """After a failed flush (e.g. disk full): recover in place, as after a crash.

        The refused flush was cut back, so the log on disk holds exactly the batches that were
        written; dropping the in-memory state and running recovery from the last checkpoint
        puts every index back in line with it. If that fails too (still no room), the error
        is raised again and the next append retries.
        """
        with self._ckpt_lock, self._lock:
            error = self.log.error
            if error is None:
                return
            for part in (self.log, self.keyidx, self.msgids, self.queues):
                try:
                    part.close()
                except OSError:
                    pass
            self._build_parts(self.appender.last_store_ms)
            try:
                self._load()
            except OSError as exc:
                self.log.refuse_appends(error)
                raise type(error)(f"{error.message}; still failing: {exc}") from exc
            self.counters["resumed_after_write_error"] = (
                self.counters.get("resumed_after_write_error", 0) + 1
            )

    # ---- lifecycle of the object ------------------------------------------------------
    @classmethod
    def open(cls, config: StoreConfig) -> Store:
        """Open (and recover) the store in ``config.data_dir``."""
        store = cls(config)
        try:
            store._load()
            store.checkpoint(clean=False)
            store._prepare_spare()
        except BaseException:
            store._release()
            raise
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
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        try:
            if self.log.error is None:
                self.checkpoint(clean=True)
        finally:
            self._release()

    def _release(self) -> None:
        if self._syncer is not None:
            self._syncer.shutdown(wait=True)
            self._syncer = None
        self.log.close()
        self.keyidx.close()
        self.msgids.close()
        self.queues.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # drops the flock
            self._lock_fd = None

    def _prepare_spare(self) -> None:
        """The next key-index file, made before an append needs it (see KeyIndexSet). A
        failure (no room) costs only that: the append that needs a file makes its own and
        reports its error."""
        try:
            self.keyidx.prepare_spare()
        except OSError as exc:
            count_error(self.counters, "spare", str(exc))

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("store is closed")

    # ---- topics ---------------------------------------------------------------------
    def create_topic(self, config: TopicConfig) -> bool:
        self._check_open()
        with self._lock:
            created = self.topics.create(config)
            cfg = self.topics.get(config.name)
            if created and config.name in self.topics.deleted:
                clear_leftovers(self, cfg.name)  # of a deleted incarnation (a crash mid-delete)
            for p in range(cfg.partitions):
                self.queue(cfg.name, p)
            return created

    def delete_topic(self, name: str) -> TopicConfig:
        """Delete a topic: gone from listings, its records unreachable, its groups' offsets
        dropped; a topic created again under the name starts empty (see topic_admin.py)."""
        self._check_open()
        return delete_topic(self, name)

    def add_partitions(self, name: str, partitions: int) -> TopicConfig:
        """Raise a topic's partition count (only up; see topic_admin.py); the new config."""
        self._check_open()
        return add_partitions(self, name, partitions)

    def get_topic(self, name: str) -> TopicConfig:
        return self.topics.get(name)

    def list_topics(self) -> list[TopicConfig]:
        return self.topics.all()

    def queue(self, topic: str, partition: int, next_offset: int | None = None) -> QueueIndex:
        return self.queues.get(topic, partition, next_offset)

    def partition_offsets(self, topic: str) -> list[tuple[int, int]]:
        cfg = self.topics.get(topic)
        out = []
        for p in range(cfg.partitions):
            q = self.queue(topic, p)
            out.append((q.first_offset, q.next_offset))
        return out

    # ---- append ---------------------------------------------------------------------
    def append(
        self,
        topic: str,
        messages: Sequence[MessageIn],
        producer_id: str | None = None,
        sequence: int | None = None,
        partitions_allowed: Sequence[int] | None = None,
    ) -> list[AppendResult]:
        """Append a batch; durable per flush_mode when this returns. See docs/ENGINE_API.md."""
        if not isinstance(messages, list | tuple):
            raise InvalidBatch("a batch is a list of MessageIn")
        check_batch_size(len(messages))
        if set(map(type, messages)) != {MessageIn}:
            i = next(i for i, m in enumerate(messages) if type(m) is not MessageIn)
            raise InvalidBatch(f"message {i} is not a MessageIn", index=i)
        values, keys, tags, msg_ids, timestamps, partitions = (
            list(c) for c in zip(*map(_FIELDS, messages), strict=True)
        )
        return self.append_columns(
            topic,
            values,
            keys,
            tags,
            msg_ids,
            timestamps,
            partitions,
            producer_id,
            sequence,
            partitions_allowed,
        ).results()

    def append_columns(
        self,
        topic: str,
        values: Sequence[bytes],
        keys: Sequence[str | None] | None = None,
        tags: Sequence[str | None] | None = None,
        msg_ids: Sequence[str | None] | None = None,
        timestamps: Sequence[int | None] | None = None,
        partitions: Sequence[int | None] | None = None,
        producer_id: str | None = None,
        sequence: int | None = None,
        partitions_allowed: Sequence[int] | None = None,
    ) -> AppendColumns:
        """``append`` of a batch given as parallel lists (None = not given for all).

        Same validation, durability and idempotency as ``append``; no object is made per
        message: the lists are packed into columns (by the writing thread, together with
        the batches of concurrent producers) and the batch is encoded as arrays.
        """
        cfg = self._start_append(topic, producer_id, sequence)
        columns = (keys, tags, msg_ids, timestamps, partitions)
        check_list_shapes(values, columns)
        return self._append_batch(
            cfg, ListBatch(values, columns), producer_id, sequence, partitions_allowed
        )

    def append_packed(
        self,
        topic: str,
        batch: PackedBatch,
        producer_id: str | None = None,
        sequence: int | None = None,
        partitions_allowed: Sequence[int] | None = None,
    ) -> AppendColumns:
        """``append`` of a batch already packed as columns (the binary wire format's shape).

        Batches that arrive while another one is being written are written together by
        whichever producer gets the append lock next (group commit): one pass of checking,
        encoding and indexing and one write for all of them, each keeping its own frames,
        results, errors and idempotency entry. Producers then share the fsync as well.
        """
        cfg = self._start_append(topic, producer_id, sequence)
        if not isinstance(batch, PackedBatch):
            raise InvalidBatch("append_packed takes a PackedBatch")
        return self._append_batch(cfg, batch, producer_id, sequence, partitions_allowed)

    def _append_batch(
        self,
        cfg: TopicConfig,
        batch: PackedBatch | ListBatch,
        producer_id: str | None,
        sequence: int | None,
        partitions_allowed: Sequence[int] | None,
    ) -> AppendColumns:
        """Queue a batch for the group commit and sleep until it is answered (or leads)."""
        check_batch_size(len(batch))
        ticket = Ticket(cfg, batch, partitions_allowed, producer_id, sequence)
        self.log.backpressure()
        return self.group_commit.submit(ticket)

    def submit(
        self,
        topic: str,
        messages: Sequence[MessageIn],
        producer_id: str | None = None,
        sequence: int | None = None,
        partitions_allowed: Sequence[int] | None = None,
    ) -> concurrent.futures.Future[list[AppendResult]]:
        """``append`` without blocking the caller (for asyncio: ``asyncio.wrap_future``)."""
        return self._executor().submit(
            self.append, topic, messages, producer_id, sequence, partitions_allowed
        )

    def submit_columns(
        self, topic: str, values: Sequence[bytes], *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[AppendColumns]:
        """``append_columns`` without blocking the caller (same arguments)."""
        return self._executor().submit(self.append_columns, topic, values, *args, **kwargs)

    def submit_packed(
        self, topic: str, batch: PackedBatch, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[AppendColumns]:
        """``append_packed`` without blocking the caller (same arguments)."""
        return self._executor().submit(self.append_packed, topic, batch, *args, **kwargs)

    def _sync_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """Threads that fsync index files during a checkpoint (fsync releases the GIL)."""
        if self._syncer is None:
            self._syncer = concurrent.futures.ThreadPoolExecutor(
                4, thread_name_prefix="msgstore-sync"
            )
        return self._syncer

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        self._check_open()
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = concurrent.futures.ThreadPoolExecutor(
                        16, thread_name_prefix="msgstore-append"
                    )
        return self._pool

    def _start_append(
        self, topic: str, producer_id: str | None, sequence: int | None
    ) -> TopicConfig:
        """Checks every append starts with; resumes after an earlier write error."""
        self._check_open()
        cfg = self.topics.get(topic)
        if self.log.error is not None:
            self._resume_after_write_error()
        if producer_id is not None or sequence is not None:
            producer = check_name("producer", producer_id)
            check_int("sequence", sequence, 0, 2**63 - 1)
            if len(producer.encode()) > MAX_PRODUCER_BYTES:
                raise InvalidArgument(f"producer id longer than {MAX_PRODUCER_BYTES} bytes")
        return cfg

    # ---- replication hooks (storage_node/replication) ---------------------------------
    def append_copied(self, data: bytes, pos: int, seg: int, frames: int) -> None:
        """(A follower's copy of this log.) Write ``data``, whole checked frames copied from
        the leader at exactly ``pos`` in its segment ``seg``, index them as recovery would,
        and return once they are durable."""
        self._check_open()
        with self._lock:
            self.log.append_raw(data, pos, seg, frames)
            loader = LogLoader(
                self.root,
                self.checkpoint_path,
                self.log,
                self.keyidx,
                self.msgids,
                self.queues,
                self.dedup,
                self.topics,
                self.objects,
            )
            loader.index_copied(data, pos)
            self.appender.last_store_ms = max(self.appender.last_store_ms, loader.last_store_ms)
        self.log.wait_durable(pos + len(data))

    def set_node_ip(self, ip: str) -> None:
        """(A replicated log taking writes here.) Message IDs handed out from now on carry
        ``ip`` (a log keeps its IP whichever node leads it) and continue after every ID
        its copy indexed while another node led it."""
        with self._lock:
            self.node_ip = ip_to_int(ip)
            self.appender.node_ip = self.node_ip
            self.appender.node_iphex = f"{self.node_ip:08x}"
            self.msgids.forget_assigned()

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
        """Messages from ``offset`` on; at least one if any, then up to the limits.

        The definition, record by record: walk the offsets from ``offset``; skip a record
        whose tag is not ``tag`` (when given; at most TAG_SCAN_LIMIT offsets are looked at,
        in steps of 1,000); stop before a record whose value would take the values past
        ``max_bytes`` (unless nothing was taken yet) and after ``max_messages``. A record
        that cannot be served (corrupt frame, lost entry) raises CorruptData when the walk
        reaches it. ``read_columns`` computes exactly this with arrays; this method returns
        its answer as ``Message`` objects."""
        return self.reads.read(topic, partition, offset, max_messages, max_bytes, tag)

    def read_columns(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_messages: int = 100,
        max_bytes: int = 1 << 20,
        tag: str | None = None,
    ) -> ReadBatch:
        """``read`` as packed columns (see storage_node/store/columnar.py): the queue-index
        entries of the range as one array, each frame fetched and CRC-checked once, rows
        and fields gathered with numpy. No Python object per message."""
        return self.reads.read_columns(topic, partition, offset, max_messages, max_bytes, tag)

    def lookup_key(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**63 - 1, max_count: int = 32
    ) -> LookupResult:
        """Messages of ``topic`` with exactly ``key`` stored in [begin_ms, end_ms], newest first."""
        return self.reads.lookup_key(topic, key, begin_ms, end_ms, max_count)

    def get_message(self, msg_id: str) -> Message:
        return self.reads.get_message(msg_id)

    def offset_for_timestamp(self, topic: str, partition: int, ts_ms: int) -> int:
        """First offset whose store timestamp is >= ts_ms (next_offset if none): binary search."""
        return self.reads.offset_for_timestamp(topic, partition, ts_ms)

    # ---- consumer offsets --------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        self._check_open()
        check_name("group", group)
        _cfg, q = self.reads.partition(topic, partition)
        offset = check_int("offset", offset, 0, 2**63 - 1)
        if offset > q.next_offset:
            raise OffsetOutOfRange(
                f"offset {offset} is beyond next offset {q.next_offset} of {topic}/{partition}",
                next_offset=q.next_offset,
            )
        self.offsets.commit(group, topic, int(partition), offset)

    def consumer_groups(self) -> list[str]:
        """Names of the groups with an offset committed on this node."""
        return sorted(self.offsets.get_groups())

    def committed_offsets(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        check_name("group", group)
        if topic is not None:
            self.topics.get(topic)
        return self.offsets.get(group, topic)

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

    def stats(self) -> dict:
        return describe(
            self.counters,
            self.log,
            self.list_files(),
            len(self.topics.topics),
            self.ready,
            self.recovery_report,
        )
