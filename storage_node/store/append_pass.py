"""The append pass: what one group commit writes, with the append lock held.

For each topic of the group: batches already written (same producer id and sequence) are
answered from the idempotency table; the rest are checked as one (a bad batch fails alone),
numbered (partitions, queue offsets, message IDs), encoded into frames, handed to the commit
log's write cache, and indexed with whole arrays (queue entries, key-index items and chain
links, message-ID addresses).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from storage_node.errors import CorruptData, DiskFull, DuplicateMessageId, NotOwner
from storage_node.formats.message_id import MS_PER_HOUR, MessageId, numbered_ids
from storage_node.formats.packed import PackedColumn, pack_batches
from storage_node.formats.partitioning import RoundRobin
from storage_node.formats.queue_index import ENTRY_DTYPE, tag_hashes
from storage_node.formats.record import encode_frames
from storage_node.store.batches import Prepared, Ticket, prepare, split_results
from storage_node.store.commitlog import NO_SPACE_ERRNOS, CommitLog
from storage_node.store.dedup import DedupTable
from storage_node.store.indexer import BatchIndex, Indexer, partition_runs
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.msg_id_index import MsgIdIndexes
from storage_node.store.queues import PartitionQueues
from storage_node.store.topics import TopicRegistry
from storage_node.store.types import AppendColumns, TopicConfig


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendPass:
    """Writes groups of tickets into the log and the derived indexes."""

    def __init__(
        self,
        log: CommitLog,
        queues: PartitionQueues,
        keyidx: KeyIndexSet,
        msgids: MsgIdIndexes,
        dedup: DedupTable,
        counters: dict,
        node_ip: int,
        max_message_bytes: int,
        check_open: Callable[[], None],
        last_store_ms: int = 0,
        topics: TopicRegistry | None = None,
    ) -> None:
        self.log = log
        self.queues = queues
        self.keyidx = keyidx
        self.msgids = msgids
        self.dedup = dedup
        self.counters = counters
        self.node_ip = node_ip
        self.node_iphex = f"{node_ip:08x}"
        self.max_message_bytes = max_message_bytes
        self.check_open = check_open
        self.last_store_ms = last_store_ms  # store times never go back, even if the clock does
        self._rr = RoundRobin()
        self.topics = topics  # for the current config and deleted topics' records
        self.indexer = Indexer(queues, keyidx, msgids, dedup, topics)

    def write(self, tickets: list[Ticket]) -> None:
        """Write the waiting batches (append lock held): per topic, duplicates answered from
        the idempotency table, the rest in one ``_write_topic``. Leaves each ticket's result
        or error, and the log end that makes it durable."""
        by_topic: dict[str, list[Ticket]] = {}
        for t in tickets:
            by_topic.setdefault(t.cfg.name, []).append(t)
        for group in by_topic.values():
            fresh: list[Ticket] = []
            repeats: list[tuple[Ticket, Ticket]] = []
            seen: dict[tuple[str, int], Ticket] = {}
            try:
                self.check_open()
                cfg = group[0].cfg
                if self.topics is not None:  # current: deleted (UnknownTopic) or grown since
                    cfg = self.topics.get(cfg.name)
                for t in group:
                    # (producer id and sequence come together: Store._start_append)
                    if t.producer_id is not None and t.sequence is not None:
                        key = (t.producer_id, t.sequence)
                        previous = self.dedup.get(*key)
                        if previous is not None:
                            self.counters["duplicate_batches"] += 1
                            t.result = previous
                            continue
                        if key in seen:  # the same batch twice in one group
                            self.counters["duplicate_batches"] += 1
                            repeats.append((t, seen[key]))
                            continue
                        seen[key] = t
                    fresh.append(t)
                fresh, prep = self._prepare_group(cfg, fresh)
                if fresh and prep is not None:
                    results = self._write_topic(cfg, prep, fresh)
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

    def _prepare_group(
        self, cfg: TopicConfig, tickets: list[Ticket]
    ) -> tuple[list[Ticket], Prepared | None]:
        """Check the batches of a group as one; a bad batch fails alone (its producer gets
        the error, the others are written). Returns the good tickets and their merged form."""
        limit = self.max_message_bytes
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
                candidate = prepare(cfg, t.batch, t.allowed, limit)
                self._check_given_ids(candidate, taken)
                prepared = candidate  # only an accepted batch: a refused one is never written
                good.append(t)
            except Exception as exc:  # that caller's error alone
                t.error = exc
        if len(good) > 1:  # checked; now as one
            prepared = prepare(cfg, pack_batches([t.batch for t in good]), None, limit)
        return good, prepared

    def _check_given_ids(self, prep: Prepared, taken: set[str]) -> None:
        """Refuse a batch whose producer-supplied message IDs repeat one stored on this
        node, one of ``taken`` or one another message of the batch has (409); else add them
        to ``taken`` and keep this node's own numbering above them."""
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
        if self.topics is not None and not self.topics.visible(rec.topic, pos):
            return False  # an ID of a deleted topic's record is free again
        return rec.msg_id == str(mid)

    def _next_partition(self, topic: str, nparts: int, allowed: set[int] | None) -> int:
        if allowed is not None:
            choices = sorted(p for p in allowed if 0 <= p < nparts)
            if not choices:
                raise NotOwner(f"this node owns no partition of {topic!r}", topic=topic)
            return self._rr.next(topic, choices)
        return self._rr.next(topic, range(nparts))

    def _write_topic(
        self, cfg: TopicConfig, prep: Prepared, tickets: list[Ticket]
    ) -> list[AppendColumns]:
        """Number, encode, write and index the batches of ``tickets`` (checked and merged
        in ``prep``) as one."""
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
        order, runs = partition_runs(parr)
        if order is None:
            start = self.queues.get(topic, runs[0][0]).next_offset
            qarr = np.arange(start, start + n, dtype=np.int64)
        else:
            qsorted = np.empty(n, dtype=np.int64)
            for p, a, b in runs:
                start = self.queues.get(topic, p).next_offset
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
            (
                count,
                (t.producer_id.encode(), t.sequence)
                if t.producer_id is not None and t.sequence is not None
                else None,
            )
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
            batches=producers,
            headers=batch.headers,
        )
        frame_pos = self.log.append(encoded.pieces, encoded.frame_sizes)
        positions = encoded.row_offsets + int(frame_pos[0])
        self.last_store_ms = store_ms
        # derived indexes, as arrays (the indexer every replay and copy goes through too)
        entries = np.empty(n, dtype=ENTRY_DTYPE)
        entries["pos"] = positions
        entries["size"] = encoded.record_sizes
        entries["tag"] = 0 if batch.tags.absent() else tag_hashes(batch.tags)
        index = BatchIndex(topic, store_ms, qarr, entries, order, runs)
        if prep.hashes is not None:
            keyed = prep.keyed  # computed with the hashes (prepare)
            if keyed is None or bool(keyed.all()):
                index.hashes, index.key_positions = prep.hashes, positions
            else:
                index.hashes, index.key_positions = prep.hashes[keyed], positions[keyed]
        if assigned:
            numbered = positions
            if given:
                mask = np.ones(n, dtype=bool)
                mask[[i for i, _ in given]] = False
                numbered = positions[mask]
            index.id_runs.append((topic, hour, self.node_ip, first_seq, numbered))
        index.ids.extend((mid, int(positions[i])) for i, mid in given)
        try:  # an index that cannot grow (disk full) stops the store until it recovers
            self.indexer.write(index)
        except OSError as exc:
            if exc.errno not in NO_SPACE_ERRNOS:
                raise
            error = DiskFull(f"index write failed: {exc}")
            self.log.abandon(int(frame_pos[0]), error)
            raise error from exc
        results = split_results(parr, qarr, ids, counts)
        for t, result in zip(tickets, results, strict=True):
            if t.producer_id is not None and t.sequence is not None:
                self.dedup.put(t.producer_id, t.sequence, result)
        c = self.counters
        c["appended_messages"] += n
        c["appended_bytes"] += prep.total
        c["append_batches"] += len(tickets)
        return results
