"""The store service: topics, appends, reads, lookups, offsets, checkpoints.

Write path (one batch): validate everything first (nothing is written for a bad batch),
then under the append lock encode the batch into one buffer, hand it to the commit log's
write cache, and update the derived indexes with whole arrays (queue entries, key-index
items and chain links, message-ID addresses). The caller then waits for the fsync that
covers the batch (``sync``) or returns at once (``async``).

Recovery, the lifecycle worker and remote compaction live in their own modules and work
on this object.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import os
import threading
import time
from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from storage_node.backend.files import ensure_dir
from storage_node.backend.objectstore import ObjectStore, open_object_store
from storage_node.errors import (
    CorruptData,
    DiskFull,
    DuplicateMessageId,
    InvalidArgument,
    InvalidBatch,
    NotFound,
    NotOwner,
    OffsetOutOfRange,
    Unavailable,
)
from storage_node.formats.checkpoint import Checkpoint
from storage_node.formats.keyhash import key_hash
from storage_node.formats.msgid import (
    MS_PER_HOUR,
    MessageId,
    ip_to_int,
    numbered_ids,
    parse_msg_id,
)
from storage_node.formats.packed import (
    ListBatch,
    PackedBatch,
    PackedColumn,
    check_list_shapes,
    pack_batches,
)
from storage_node.formats.queue_index import ENTRY_DTYPE, QueueIndex, tag_hash, tag_hashes
from storage_node.formats.record import (
    MAX_PRODUCER_BYTES,
    Record,
    encode_frames,
)
from storage_node.store.batches import (
    Prepared,
    Ticket,
    check_batch_size,
    prepare,
    split_results,
)
from storage_node.store.columnar import ReadBatch, concat_batches, decode_rows
from storage_node.store.commitlog import NO_SPACE_ERRNOS, CommitLog
from storage_node.store.config import StoreConfig
from storage_node.store.dedup import DedupTable
from storage_node.store.keyindex import KeyIndexSet
from storage_node.store.msgids import MsgIdIndexes
from storage_node.store.names import check_name
from storage_node.store.offsets import OffsetStore
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

MAX_READ_MESSAGES = 10_000
MAX_LOOKUP = 10_000
TAG_SCAN_LIMIT = 20_000
TAG_SCAN_STEP = 1_000  # a tag filter looks at offsets in steps of this many
LEAD_ROUNDS = 8  # passes one producer leads before it hands the lead on
GATHER_WAIT_S = 0.0003  # how long a sync leader waits for the last group's producers to queue


_FIELDS = attrgetter("value", "key", "tag", "msg_id", "timestamp", "partition")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not low <= value <= high
    ):
        raise InvalidArgument(f"{name} must be an integer in [{low}, {high}], not {value!r}")
    return int(value)


def to_message(rec: Record) -> Message:
    return Message(
        rec.topic,
        rec.partition,
        rec.queue_offset,
        rec.key,
        rec.tag,
        rec.msg_id,
        rec.born_ms,
        rec.store_ms,
        rec.value,
    )


class Store:
    """One node's segment store. Thread-safe; open with ``Store.open(config)``."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config.validate()
        # A configured object store is opened first: a bad URL fails before touching disk.
        configured = open_object_store(config.object_store_url) if config.object_store_url else None
        root = self.root = os.path.abspath(config.data_dir)
        ensure_dir(root)
        self._lock_fd = os.open(os.path.join(root, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            raise Unavailable(f"data directory is in use by another store: {exc}") from exc
        self.ready = False
        self._closed = False
        self._lock = threading.RLock()  # the append lock
        self._pending_lock = threading.Lock()
        self._pending: list[Ticket] = []  # batches waiting for the next pass
        self._leading = False  # a producer is writing a pass (others queue behind it)
        self._gathered = threading.Condition(self._pending_lock)  # enough producers queued
        self._want = 0  # producers a waiting leader wants queued (0: nobody waits)
        self._last_group = 1
        self._ckpt_lock = threading.Lock()
        self._maint_lock = threading.Lock()  # one compaction/upload/expiry at a time
        self.checkpoint_path = os.path.join(root, "checkpoint")
        self.topics = TopicRegistry(os.path.join(root, "topics.json"))
        self.offsets = OffsetStore(os.path.join(root, "offsets"))
        self.dedup = DedupTable(os.path.join(root, "producers.json"))
        self.objects: ObjectStore = configured or open_object_store(os.path.join(root, "objects"))
        self.queues: dict[tuple[str, int], QueueIndex] = {}
        self._build_parts()
        self.node_ip = ip_to_int(config.node_ip)
        self.node_iphex = f"{self.node_ip:08x}"
        self.last_store_ms = 0
        self._rr: dict[str, int] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._syncer: concurrent.futures.ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        self._maint_thread: threading.Thread | None = None
        self.recovery_report: dict = {}
        self.saved_checkpoint: Checkpoint | None = None  # the last one on disk
        self.counters = {
            "appended_messages": 0,
            "appended_bytes": 0,
            "append_batches": 0,
            "duplicate_batches": 0,
            "reads": 0,
            "key_lookups": 0,
            "msgid_lookups": 0,
            "checkpoints": 0,
            "compacted_segments": 0,
            "compacted_key_indexes": 0,
            "uploaded_files": 0,
            "expired_files": 0,
        }

    def _build_parts(self) -> None:
        """The commit log and derived indexes: what recovery fills in."""
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
        self.queues = {}

    def _resume_after_write_error(self) -> None:
        """After a failed flush (e.g. disk full): recover in place, as after a crash.

        The refused flush was cut back, so the log on disk holds exactly the batches that were
        written; dropping the in-memory state and running recovery from the last checkpoint
        puts every index back in line with it. If that fails too (still no room), the error
        is raised again and the next append retries.
        """
        from storage_node.store.recovery import recover

        with self._ckpt_lock, self._lock:
            if self.log._error is None:
                return
            error = self.log._error
            for part in (self.log, self.keyidx, self.msgids, *self.queues.values()):
                try:
                    part.close()
                except OSError:
                    pass
            self._build_parts()
            self.dedup = DedupTable(os.path.join(self.root, "producers.json"))
            try:
                self.recovery_report = recover(self)
                self.log.start()
            except OSError as exc:
                self.log._error = error
                raise type(error)(f"{error.message}; still failing: {exc}") from exc
            self.counters["resumed_after_write_error"] = (
                self.counters.get("resumed_after_write_error", 0) + 1
            )

    # ---- lifecycle of the object ------------------------------------------------------
    @classmethod
    def open(cls, config: StoreConfig) -> Store:
        """Open (and recover) the store in ``config.data_dir``."""
        from storage_node.store.recovery import recover

        store = cls(config)
        try:
            store.recovery_report = recover(store)
            store.log.start()
            store.checkpoint(clean=False)
            store._prepare_spare()
        except BaseException:
            store._release()
            raise
        store._maint_thread = threading.Thread(
            target=store._maintenance_loop, name="msgstore-maint", daemon=True
        )
        store._maint_thread.start()
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
        self._stop.set()
        if self._maint_thread is not None:
            self._maint_thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        try:
            if self.log._error is None:
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
        for q in self.queues.values():
            q.close()
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
            self.counters["spare_errors"] = self.counters.get("spare_errors", 0) + 1
            self.counters["last_spare_error"] = str(exc)  # type: ignore[assignment]

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("store is closed")

    def _maintenance_loop(self) -> None:
        from storage_node.store.lifecycle import run_lifecycle_once

        interval = self.config.lifecycle_interval_s
        next_ckpt = time.monotonic() + self.config.checkpoint_interval_s
        next_life = time.monotonic() + interval if interval > 0 else float("inf")
        while not self._stop.wait(
            min(1.0, max(0.05, min(next_ckpt, next_life) - time.monotonic()))
        ):
            self._prepare_spare()  # after an append took the last one
            now = time.monotonic()
            try:
                if now >= next_life:
                    run_lifecycle_once(self)
                    next_life = time.monotonic() + interval
                    next_ckpt = time.monotonic() + self.config.checkpoint_interval_s
                elif now >= next_ckpt:
                    self.checkpoint(clean=False)
                    next_ckpt = time.monotonic() + self.config.checkpoint_interval_s
            except Exception as exc:  # keep serving; surface the problem in stats
                self.counters["maintenance_errors"] = self.counters.get("maintenance_errors", 0) + 1
                self.counters["last_maintenance_error"] = repr(exc)  # type: ignore[assignment]

    # ---- topics ---------------------------------------------------------------------
    def create_topic(self, config: TopicConfig) -> bool:
        self._check_open()
        from storage_node.store.topic_admin import clear_leftovers

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
        from storage_node.store.topic_admin import delete_topic

        self._check_open()
        return delete_topic(self, name)

    def add_partitions(self, name: str, partitions: int) -> TopicConfig:
        """Raise a topic's partition count (only up; see topic_admin.py); the new config."""
        from storage_node.store.topic_admin import add_partitions

        self._check_open()
        return add_partitions(self, name, partitions)

    def get_topic(self, name: str) -> TopicConfig:
        return self.topics.get(name)

    def list_topics(self) -> list[TopicConfig]:
        return self.topics.all()

    def queue(self, topic: str, partition: int, next_offset: int | None = None) -> QueueIndex:
        q = self.queues.get((topic, partition))
        if q is None:
            path = os.path.join(self.root, "queues", topic, str(partition))
            q = QueueIndex(path, self.config.queue_file_entries, next_offset)
            self.queues[(topic, partition)] = q
        return q

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
        columns = [list(c) for c in zip(*map(_FIELDS, messages), strict=True)]
        return self.append_columns(
            topic,
            *columns,
            producer_id,
            sequence,
            partitions_allowed,  # type: ignore[arg-type]
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
        with self._pending_lock:
            self._pending.append(ticket)
            lead = not self._leading
            self._leading = True
            if self._want and len(self._pending) >= self._want:
                self._gathered.notify()
        try:
            if not lead:
                ticket.wake.acquire()  # the one sleep of a producer: until answered, or to lead
            if lead or ticket.leader:
                ticket.leader = False  # leading now: an interruption from here on is _lead's
                self._lead()
                ticket.wake.acquire()  # until answered (its batch was in the first pass)
        except BaseException:  # interrupted (KeyboardInterrupt): nobody may wait for us
            self._withdraw(ticket)
            raise
        if ticket.error is not None:
            raise ticket.error
        return ticket.result  # type: ignore[return-value]

    def _lead(self) -> None:
        """Write the waiting batches, the leader's own among them, and hand the lead on.

        Async mode: pass after pass, up to LEAD_ROUNDS, each group answered once written.
        Sync mode (group commit): one pass, one write and one fsync for the whole group,
        then the group is answered and the lead goes to a waiting producer. A producer that
        kept leading could not produce, so its next batch would miss the next group and
        travel alone (measured: two passes and two fsyncs per round of eight producers
        instead of one). The next leader gives the producers just answered a moment to
        queue (``_gather``), so a group holds one batch of every producer.
        """
        sync = self.log.sync_mode
        group: list[Ticket] | None = []
        try:
            for _ in range(1 if sync else LEAD_ROUNDS):
                if sync:
                    self._gather()
                group = self._write_group()
                if group is None:
                    return  # the lead was given up with the queue found empty
                if sync:
                    self._answer_durable(group)
                else:
                    for t in group:
                        t.answer()
        finally:  # also when interrupted (KeyboardInterrupt): the others must not wait forever
            if group is not None:
                self._hand_on()

    def _withdraw(self, ticket: Ticket) -> None:
        """(A producer interrupted while it waited or led.) Its batch leaves the queue if no
        pass took it yet, and a lead just handed to it goes on to the next producer."""
        with self._pending_lock:
            self._pending = [t for t in self._pending if t is not ticket]
            handed = ticket.leader
            ticket.leader = False
        if handed:
            self._hand_on()

    def _hand_on(self) -> None:
        """Give the lead to the first waiting producer, or give it up."""
        with self._pending_lock:
            if self._pending:
                successor = self._pending[0]
                successor.leader = True
                successor.wake.release()
            else:
                self._leading = False

    def _gather(self) -> None:
        """(Sync leader.) Wait, GATHER_WAIT_S at most, until as many batches queue as the
        last group held: its producers were just answered and come straight back (the one
        that completes the count wakes us). A lone producer never waits."""
        with self._pending_lock:
            if len(self._pending) < self._last_group:
                self._want = self._last_group
                try:
                    self._gathered.wait(GATHER_WAIT_S)
                finally:
                    self._want = 0

    def _write_group(self) -> list[Ticket] | None:
        """One pass for every waiting batch; None (and the lead given up) when none waits.
        An error is each producer's answer, never the leader's to raise."""
        group: list[Ticket] = []
        try:
            with self._lock:  # whatever queued while we waited for it joins the pass
                with self._pending_lock:
                    group, self._pending = self._pending, []
                    if not group:
                        self._leading = False
                        return None
                self._append_tickets(group)
        except BaseException as exc:  # not written: every producer hears of it
            for t in group:
                t.error = t.error or exc
            if not isinstance(exc, Exception):
                for t in group:
                    t.answer()
                raise
        return group

    def _answer_durable(self, group: list[Ticket]) -> None:
        """(Sync mode.) Write and fsync the group's bytes, one write and one fsync for all
        of them, then answer its producers; a batch that failed needs no fsync."""
        self._last_group = len(group)
        waiting = [t for t in group if t.error is None]
        try:
            if waiting:
                self.log.wait_durable(max(t.target for t in waiting))
        except BaseException as exc:  # not known durable: nobody is answered with a result
            error = exc
            if not isinstance(exc, Exception):  # the leader was interrupted: the others hear
                error = Unavailable("interrupted before the batch's fsync; it may be lost")
            for t in waiting:
                t.error = t.error or error
            if error is not exc:
                raise
        finally:
            for t in group:
                t.answer()

    def _append_tickets(self, tickets: list[Ticket]) -> None:
        """Write the waiting batches (append lock held): per topic, duplicates answered from
        the idempotency table, the rest in one ``_append_locked``."""
        by_topic: dict[str, list[Ticket]] = {}
        for t in tickets:
            by_topic.setdefault(t.cfg.name, []).append(t)
        for group in by_topic.values():
            fresh: list[Ticket] = []
            repeats: list[tuple[Ticket, Ticket]] = []
            seen: dict[tuple[str, int], Ticket] = {}
            try:
                self._check_open()
                cfg = self.topics.get(group[0].cfg.name)  # current: deleted, or grown
                for t in group:
                    if t.producer_id is not None:
                        key = (t.producer_id, t.sequence)
                        previous = self.dedup.get(*key)  # type: ignore[arg-type]
                        if previous is not None:
                            self.counters["duplicate_batches"] += 1
                            t.result = previous
                            continue
                        if key in seen:  # the same batch twice in one group
                            self.counters["duplicate_batches"] += 1
                            repeats.append((t, seen[key]))
                            continue
                        seen[key] = t  # type: ignore[index]
                    fresh.append(t)
                fresh, prep = self._prepare_group(cfg, fresh)
                if fresh:
                    results = self._append_locked(cfg, prep, fresh)  # type: ignore[arg-type]
                    for t, result in zip(fresh, results, strict=True):
                        t.result = result
                for t, first in repeats:
                    t.result = first.result
            except BaseException as exc:  # every producer of the group hears of it
                for t in group:
                    if t.error is None:
                        t.error = exc
            for t in group:
                t.target = self.log.end

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
        self, topic: str, values: Sequence[bytes], *args: object, **kwargs: object
    ) -> concurrent.futures.Future[AppendColumns]:
        """``append_columns`` without blocking the caller (same arguments)."""
        return self._executor().submit(self.append_columns, topic, values, *args, **kwargs)

    def submit_packed(
        self, topic: str, batch: PackedBatch, *args: object, **kwargs: object
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
        if self.log._error is not None:
            self._resume_after_write_error()
        if producer_id is not None or sequence is not None:
            check_name("producer", producer_id)
            _check_int("sequence", sequence, 0, 2**63 - 1)
            if len(producer_id.encode()) > MAX_PRODUCER_BYTES:  # type: ignore[union-attr]
                raise InvalidArgument(f"producer id longer than {MAX_PRODUCER_BYTES} bytes")
        return cfg

    def _prepare_group(
        self, cfg: TopicConfig, tickets: list[Ticket]
    ) -> tuple[list[Ticket], Prepared | None]:
        """Check the batches of a group as one; a bad batch fails alone (its producer gets
        the error, the others are written). Returns the good tickets and their merged form."""
        limit = self.config.max_message_bytes
        if len(tickets) > 1 and all(t.allowed is None for t in tickets):
            try:
                merged = prepare(cfg, pack_batches([t.batch for t in tickets]), None, limit)
                self._check_given_ids(merged, set())
                return tickets, merged
            except Exception:  # typed, or odd input of one caller (a ValueError, say)
                pass  # find out whose batch it is
        good: list[Ticket] = []
        prepared = None
        taken: set[str] = set()  # producer-supplied IDs of the batches accepted so far
        for t in tickets:  # one by one: each its own errors and partitions_allowed
            try:
                t.batch = pack_batches([t.batch])
                prepared = prepare(cfg, t.batch, t.allowed, limit)
                self._check_given_ids(prepared, taken)
                good.append(t)
            except Exception as exc:  # that caller's error alone
                t.error = exc
        if len(good) > 1:  # checked; now as one
            prepared = prepare(cfg, pack_batches([t.batch for t in good]), None, limit)
        return good, prepared

    def _check_given_ids(self, prep: Prepared, taken: set[str]) -> None:
        """(Append lock held.) Refuse a batch whose producer-supplied message IDs repeat one
        stored on this node, one of ``taken`` or one another message of the batch has (409);
        else add them to ``taken`` and keep this node's own numbering above them."""
        if not prep.given_ids:
            return
        mine: set[str] = set()
        for i, mid in prep.given_ids:
            text = str(mid)
            if text in mine or text in taken or self._msg_id_stored(mid):
                raise DuplicateMessageId(
                    f"message {i}: message ID {text!r} is already taken", index=i, msg_id=text
                )
            mine.add(text)
        taken.update(mine)
        for _i, mid in prep.given_ids:
            if mid.ip == self.node_ip:
                self.msgids.reserve(mid.app, mid.hour, mid.ip, mid.seq)

    def _msg_id_stored(self, mid: MessageId) -> bool:
        pos = self.msgids.get(mid)
        if pos is None or not self.log.start_pos <= pos < self.log.end:
            return False
        try:
            rec = self.log.read(pos)
        except CorruptData:
            # no record row at ``pos``: an index entry left by a batch a crash cut off (its
            # position was handed out again), so the ID is not stored there
            return False
        # an ID of a deleted topic's record is free again
        return rec.msg_id == str(mid) and self.topics.visible(rec.topic, pos)

    def _append_locked(
        self, cfg: TopicConfig, prep: Prepared, tickets: list[Ticket]
    ) -> list[AppendColumns]:
        """Number, encode, write and index the batches of ``tickets`` (checked and merged
        in ``prep``) as one (lock held)."""
        topic = cfg.name
        counts = [len(t.batch) for t in tickets]
        if int(prep.parts.min()) < 0:  # no key, no partition: one sticky partition per batch
            a = 0
            for t, count in zip(tickets, counts, strict=True):
                mine = prep.parts[a : a + count]
                allowed = None if t.allowed is None else {int(p) for p in t.allowed}
                mine[mine < 0] = self._next_partition(topic, cfg.partitions, allowed)
                a += count
        n = prep.n
        batch = prep.batch
        store_ms = max(_now_ms(), self.last_store_ms)
        hour = store_ms // MS_PER_HOUR
        parr = prep.parts
        # queue offsets: one stable sort groups the batch by partition, keeping its order
        first_part = int(parr[0])
        if n == 1 or bool((parr == first_part).all()):
            start = self.queue(topic, first_part).next_offset
            qarr = np.arange(start, start + n, dtype=np.int64)
            order = None
            groups = [(first_part, 0, n)]
        else:
            order = np.argsort(parr.astype(np.uint16), kind="stable")  # radix sort: small ints
            sorted_parts = parr[order]
            cuts = (np.flatnonzero(sorted_parts[1:] != sorted_parts[:-1]) + 1).tolist()
            groups = [
                (int(sorted_parts[a]), a, b) for a, b in zip([0, *cuts], [*cuts, n], strict=True)
            ]
            qsorted = np.empty(n, dtype=np.int64)
            for p, a, b in groups:
                start = self.queue(topic, p).next_offset
                qsorted[a:b] = np.arange(start, start + b - a)
            qarr = np.empty(n, dtype=np.int64)
            qarr[order] = qsorted
        # message IDs: node-assigned ones are a run of sequence numbers of (topic, hour)
        given = prep.given_ids
        assigned = n - len(given)
        first_seq = 0
        prefix = f"{topic}-{self.node_iphex}-{hour}-".encode()
        if assigned:
            first_seq = self.msgids.assign(topic, hour, self.node_ip, assigned)
        if not given:
            ids = numbered_ids(prefix, first_seq, n)
        else:
            seqs = iter(range(first_seq, first_seq + assigned))
            have = dict((i, str(mid).encode()) for i, mid in given)
            ids = PackedColumn.of_bytes(
                [have[i] if i in have else prefix + b"%d" % next(seqs) for i in range(n)]
            )
        born = store_ms if prep.born is None else np.where(prep.born < 0, store_ms, prep.born)
        producers = [
            (count, (t.producer_id.encode(), t.sequence) if t.producer_id is not None else None)
            for t, count in zip(tickets, counts, strict=True)
        ]
        encoded = encode_frames(
            topic.encode(),
            parr,
            qarr,
            born,
            store_ms,
            batch.keys,
            batch.tags,
            ids,
            batch.values,
            batches=producers,  # type: ignore[arg-type]
        )
        frame_pos = self.log.append(encoded.pieces, encoded.frame_sizes)
        positions = encoded.row_offsets + int(frame_pos[0])
        self.last_store_ms = store_ms
        try:  # an index that cannot grow (disk full) stops the store until it recovers
            # derived indexes, as arrays
            entries = np.empty(n, dtype=ENTRY_DTYPE)
            entries["pos"] = positions
            entries["size"] = encoded.record_sizes
            entries["tag"] = 0 if batch.tags.absent() else tag_hashes(batch.tags)
            if order is not None:
                entries = entries[order]
            for p, a, b in groups:
                self.queue(topic, p).append(entries[a:b])
            if prep.hashes is not None:
                keyed = prep.keyed
                if bool(keyed.all()):  # type: ignore[union-attr]
                    self.keyidx.add(prep.hashes, positions, store_ms)
                else:
                    self.keyidx.add(prep.hashes[keyed], positions[keyed], store_ms)
            if assigned:
                if not given:
                    self.msgids.put_run(topic, hour, self.node_ip, first_seq, positions)
                else:
                    mask = np.ones(n, dtype=bool)
                    mask[[i for i, _ in given]] = False
                    self.msgids.put_run(topic, hour, self.node_ip, first_seq, positions[mask])
            for i, mid in given:
                self.msgids.put(mid, int(positions[i]))
        except OSError as exc:
            if exc.errno not in NO_SPACE_ERRNOS:
                raise
            error = DiskFull(f"index write failed: {exc}")
            self.log.abandon(int(frame_pos[0]), error)
            raise error from exc
        results = split_results(parr, qarr, ids, counts)
        for t, result in zip(tickets, results, strict=True):
            if t.producer_id is not None:
                self.dedup.put(t.producer_id, t.sequence, result)  # type: ignore[arg-type]
        c = self.counters
        c["appended_messages"] += n
        c["appended_bytes"] += prep.total
        c["append_batches"] += len(tickets)
        return results

    def _next_partition(self, topic: str, nparts: int, allowed: set[int] | None) -> int:
        rr = self._rr.get(topic, 0)
        self._rr[topic] = rr + 1
        if allowed is not None:
            choices = sorted(p for p in allowed if 0 <= p < nparts)
            if not choices:
                raise NotOwner(f"this node owns no partition of {topic!r}", topic=topic)
            return choices[rr % len(choices)]
        return rr % nparts

    # ---- reads ----------------------------------------------------------------------
    def _partition(self, topic: str, partition: object) -> tuple[TopicConfig, QueueIndex]:
        cfg = self.topics.get(topic)
        p = _check_int("partition", partition, 0, cfg.partitions - 1)
        return cfg, self.queue(topic, p)

    def _read_args(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_messages: int,
        max_bytes: int,
        tag: str | None,
    ) -> tuple[QueueIndex, int, int, int, int]:
        """Checked read arguments: (queue, offset, max_messages, max_bytes, next offset)."""
        self._check_open()
        _cfg, q = self._partition(topic, partition)
        max_messages = _check_int("max_messages", max_messages, 1, MAX_READ_MESSAGES)
        max_bytes = _check_int("max_bytes", max_bytes, 1, 1 << 31)
        if tag is not None and not isinstance(tag, str):
            raise InvalidArgument("tag must be a string")
        first, nxt = q.first_offset, q.next_offset
        if isinstance(offset, bool) or not isinstance(offset, int | np.integer):
            raise InvalidArgument(f"offset must be an integer, not {offset!r}")
        offset = int(offset)
        if offset < first or offset > nxt:
            raise OffsetOutOfRange(
                f"offset {offset} outside [{first}, {nxt}] of {topic}/{partition}",
                first_offset=first,
                next_offset=nxt,
            )
        return q, offset, max_messages, max_bytes, nxt

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
        batch = self.read_columns(topic, partition, offset, max_messages, max_bytes, tag)
        return ReadResult(batch.messages(), batch.next_offset)

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
        q, offset, max_messages, max_bytes, nxt = self._read_args(
            topic, partition, offset, max_messages, max_bytes, tag
        )
        self.counters["reads"] += 1
        if offset >= nxt:
            return ReadBatch.empty(topic, partition, offset)
        if tag is None:
            count = max_messages
        else:
            steps = min(TAG_SCAN_LIMIT // TAG_SCAN_STEP, -(-(nxt - offset) // TAG_SCAN_STEP))
            count = steps * TAG_SCAN_STEP
        entries = q.read(offset, count)
        scan_end = offset + len(entries)
        offs = np.arange(offset, scan_end, dtype=np.int64)
        pos = entries["pos"].astype(np.int64)
        sizes = entries["size"].astype(np.int64)
        want: bytes | None = None
        if tag is not None:
            want = tag.encode()
            sel = np.flatnonzero(entries["tag"] == np.uint64(tag_hash(want)))
            offs, pos, sizes = offs[sel], pos[sel], sizes[sel]
        parts: list[ReadBatch] = []
        taken = 0
        value_bytes = 0
        ratio = 1.0  # value bytes per entry byte (at most 1): how far one step reaches
        i, n = 0, len(pos)
        while i < n:
            need = max_messages - taken
            # a step: the rows whose values surely (then, by the estimate, likely) fit
            reach = np.cumsum(sizes[i : i + need]) * ratio
            j = i + min(
                len(reach), int(np.searchsorted(reach, (max_bytes - value_bytes) * 1.1)) + 1
            )
            got = decode_rows(self.log, topic, partition, offs[i:j], pos[i:j], sizes[i:j], want)
            batch = got.batch
            lens = batch.values.lens
            fit = int(np.searchsorted(np.cumsum(lens) + value_bytes, max_bytes, side="right"))
            if taken == 0 and fit == 0 and len(lens):
                fit = 1  # at least one message
            k = min(fit, need)
            if k:
                part = batch.head(k)
                parts.append(part)
                taken += k
                value_bytes += part.value_bytes
            if fit < need and fit < len(lens):  # the next value would pass max_bytes
                return concat_batches(parts, int(batch.offsets[fit]))
            if taken >= max_messages:
                return concat_batches(parts, int(parts[-1].offsets[-1]) + 1)
            if got.error is not None:
                raise got.error
            if got.ok:
                ratio = max(
                    0.01, min(1.0, batch.value_bytes / max(1, int(got.scanned_sizes.sum())))
                )
            i = j
        if not parts:
            return ReadBatch.empty(topic, partition, scan_end)
        return concat_batches(parts, scan_end)

    def _read_entry(self, pos: int, size: int, topic: str, partition: int, offset: int) -> Record:
        from storage_node.errors import CorruptData

        if size == 0:
            raise CorruptData(
                f"{topic}/{partition} offset {offset} was lost to corruption", offset=offset
            )
        rec = self.log.read(pos)
        if rec.topic != topic or rec.partition != partition or rec.queue_offset != offset:
            raise CorruptData(
                f"queue index of {topic}/{partition} disagrees with the log at offset {offset}"
            )
        return rec

    def lookup_key(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**63 - 1, max_count: int = 32
    ) -> LookupResult:
        """Messages of ``topic`` with exactly ``key`` stored in [begin_ms, end_ms], newest first."""
        self._check_open()
        self.topics.get(topic)
        if not isinstance(key, str):
            raise InvalidArgument("key must be a string")
        begin_ms = _check_int("begin_ms", begin_ms, 0, 2**63 - 1)
        end_ms = _check_int("end_ms", end_ms, 0, 2**63 - 1)
        max_count = _check_int("max_count", max_count, 1, MAX_LOOKUP)
        self.counters["key_lookups"] += 1
        out: list[Message] = []
        if begin_ms > end_ms:
            return LookupResult(out, False)
        start, end = self.log.start_pos, self.log.end
        for pos in self.keyidx.lookup(key_hash(key), begin_ms, end_ms):
            if pos < start or pos >= end:
                continue
            rec = self.log.read(pos)
            if (
                rec.key == key
                and rec.topic == topic
                and begin_ms <= rec.store_ms <= end_ms
                and self.topics.visible(topic, pos)
            ):
                out.append(to_message(rec))
                if len(out) >= max_count:
                    return LookupResult(out, True)
        return LookupResult(out, False)

    def get_message(self, msg_id: str) -> Message:
        self._check_open()
        mid = parse_msg_id(msg_id)
        self.counters["msgid_lookups"] += 1
        pos = self.msgids.get(mid)
        if pos is None or not self.log.start_pos <= pos < self.log.end:
            raise NotFound(f"no message with ID {msg_id!r}", msg_id=msg_id)
        rec = self.log.read(pos)
        if rec.msg_id != msg_id or not self.topics.visible(rec.topic, pos):
            raise NotFound(f"no message with ID {msg_id!r}", msg_id=msg_id)
        return to_message(rec)

    def offset_for_timestamp(self, topic: str, partition: int, ts_ms: int) -> int:
        """First offset whose store timestamp is >= ts_ms (next_offset if none): binary search."""
        self._check_open()
        _cfg, q = self._partition(topic, partition)
        ts_ms = _check_int("timestamp", ts_ms, -(2**63), 2**63 - 1)
        lo, hi = q.first_offset, q.next_offset
        while lo < hi:
            mid = (lo + hi) // 2
            ((pos, size, _tag),) = q.entries(mid, 1)
            rec = self._read_entry(pos, size, topic, partition, mid)
            if rec.store_ms >= ts_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # ---- consumer offsets --------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        self._check_open()
        check_name("group", group)
        _cfg, q = self._partition(topic, partition)
        offset = _check_int("offset", offset, 0, 2**63 - 1)
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
            with self._lock:
                active = self.keyidx.active
                ck = Checkpoint(
                    log_end=self.log.end,
                    clean=False,
                    key_index_name=active.name if active is not None else None,
                    key_index_count=active.count if active is not None else 1,
                    queues={},
                    last_store_ms=self.last_store_ms,
                )
                for (t, p), q in self.queues.items():
                    ck.queues.setdefault(t, {})[str(p)] = q.next_offset
                dedup = self.dedup.snapshot()
            # the index files are synced alongside the log's fsync, not after it
            syncs = [self.keyidx.sync, self.msgids.sync, *(q.sync for q in self.queues.values())]
            pending = [self._sync_pool().submit(sync) for sync in syncs]
            self.log.wait_durable(ck.log_end)
            for future in pending:
                future.result()
            self.dedup.save(dedup)
            ck.clean = clean
            ck.save(self.checkpoint_path)
            self.saved_checkpoint = ck
            self.counters["checkpoints"] += 1
            return ck

    # ---- files, lifecycle, remote compaction (implemented in lifecycle.py) ---------------
    def list_files(self) -> list[FileInfo]:
        from storage_node.store.lifecycle import list_files

        return list_files(self)

    def seal_active(self) -> None:
        self._check_open()
        with self._lock:
            self.log.roll()
            self.keyidx.seal_active()
        self.checkpoint(clean=False)

    def compact_now(self) -> dict:
        from storage_node.store.lifecycle import compact_now

        self._check_open()
        return compact_now(self)

    def run_lifecycle_once(self, now_ms: int | None = None) -> dict:
        from storage_node.store.lifecycle import run_lifecycle_once

        self._check_open()
        return run_lifecycle_once(self, now_ms)

    def sealed_files(self) -> list[FileInfo]:
        from storage_node.store.lifecycle import sealed_files

        return sealed_files(self)

    def open_sealed(self, kind: str, name: str) -> bytes:
        from storage_node.store.lifecycle import open_sealed

        self._check_open()
        return open_sealed(self, kind, name)

    def commit_compacted(self, kind: str, name: str, data: bytes, crc32: int) -> FileInfo:
        from storage_node.store.lifecycle import commit_compacted

        self._check_open()
        return commit_compacted(self, kind, name, data, crc32)

    def stats(self) -> dict:
        files = self.list_files()
        out: dict = dict(self.counters)
        out.update({f"log_{k}": v for k, v in self.log.stats.items()})
        out["log_start"] = self.log.start_pos
        out["log_end"] = self.log.end
        out["log_durable_end"] = self.log.durable_end
        out["topics"] = len(self.topics.topics)
        for state in ("unsealed", "sealed", "compacted", "uploaded"):
            out[f"segments_{state}"] = sum(
                1 for f in files if f.kind == "segment" and f.state == state
            )
            out[f"key_indexes_{state}"] = sum(
                1 for f in files if f.kind == "key_index" and f.state == state
            )
        out["stored_bytes"] = sum(f.stored_size for f in files if f.state != "uploaded")
        out["uploaded_bytes"] = sum(f.stored_size for f in files if f.state == "uploaded")
        out["ready"] = self.ready
        out["recovery"] = self.recovery_report
        return out
