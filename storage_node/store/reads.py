"""Reads: a partition by offset (records or packed columns), lookups by key and message ID,
and offset-for-time. Every answer is checked against the log (frame CRC, topic, partition,
offset) before it is served; the columnar decoding itself is ``store/columnar.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from storage_node.errors import CorruptData, InvalidArgument, NotFound, OffsetOutOfRange
from storage_node.formats.headers import decode_headers
from storage_node.formats.keyhash import key_hash
from storage_node.formats.limits import MAX_LOOKUP, MAX_READ_MESSAGES
from storage_node.formats.message_id import parse_msg_id
from storage_node.formats.queue_index import QueueIndex, tag_hash
from storage_node.formats.record import Record
from storage_node.store.arguments import check_int
from storage_node.store.columnar import Rows, SpanMemo, decode_rows
from storage_node.store.commitlog import CommitLog
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.msg_id_index import MsgIdIndexes
from storage_node.store.queues import PartitionQueues
from storage_node.store.read_batch import ReadBatch, concat_batches, head_of_parts, offset_of_row
from storage_node.store.topics import TopicRegistry
from storage_node.store.types import LookupResult, Message, ReadResult, TopicConfig

TAG_SCAN_LIMIT = 20_000
TAG_SCAN_STEP = 1_000  # a tag filter looks at offsets in steps of this many


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
        decode_headers(rec.headers) if rec.headers else (),
    )


class Reads:
    """The read side of a store (see ``Store.read`` for the definition of a read)."""

    def __init__(
        self,
        log: CommitLog,
        topics: TopicRegistry,
        queues: PartitionQueues,
        keyidx: KeyIndexSet,
        msgids: MsgIdIndexes,
        counters: dict,
        check_open: Callable[[], None],
    ) -> None:
        self.log = log
        self.topics = topics
        self.queues = queues
        self.keyidx = keyidx
        self.msgids = msgids
        self.counters = counters
        self.check_open = check_open

    def partition(self, topic: str, partition: object) -> tuple[TopicConfig, QueueIndex]:
        """The topic's config and the queue of a checked partition number."""
        cfg = self.topics.get(topic)
        p = check_int("partition", partition, 0, cfg.partitions - 1)
        return cfg, self.queues.get(topic, p)

    def partition_offsets(self, topic: str) -> list[tuple[int, int]]:
        """(first offset, next offset) of each partition of ``topic``."""
        cfg = self.topics.get(topic)
        queues = [self.queues.get(topic, p) for p in range(cfg.partitions)]
        return [(q.first_offset, q.next_offset) for q in queues]

    def partition_sizes(self, topic: str) -> list[int]:
        """The bytes of the records each partition of ``topic`` holds (QueueIndex.stored_bytes)."""
        cfg = self.topics.get(topic)
        return [self.queues.get(topic, p).stored_bytes() for p in range(cfg.partitions)]

    def read_args(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_messages: int,
        max_bytes: int,
        tag: str | None,
    ) -> tuple[QueueIndex, int, int, int, int]:
        """Checked read arguments: (queue, offset, max_messages, max_bytes, next offset)."""
        self.check_open()
        _cfg, q = self.partition(topic, partition)
        max_messages = check_int("max_messages", max_messages, 1, MAX_READ_MESSAGES)
        max_bytes = check_int("max_bytes", max_bytes, 1, 1 << 31)
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
        memo: SpanMemo | None = None,
    ) -> ReadBatch:
        """``read`` as packed columns (see storage_node/store/columnar.py): the queue-index
        entries of the range as one array, each frame fetched and CRC-checked once, rows
        and fields gathered with numpy. No Python object per message. ``memo`` shares the
        fetched log bytes with other reads of the same request (``fetch_columns``)."""
        parts, nxt = self.read_column_parts(
            topic, partition, offset, max_messages, max_bytes, tag, memo
        )
        if not parts:
            return ReadBatch.empty(topic, partition, nxt)
        return concat_batches(parts, nxt)

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
        """``read_columns`` as the batches it is made of (one per span of log bytes read)
        and the next offset, not joined into one: for an answer that sends them one after
        another (a Kafka Fetch's record batches), which saves copying every column again."""
        q, offset, max_messages, max_bytes, nxt = self.read_args(
            topic, partition, offset, max_messages, max_bytes, tag
        )
        self.counters["reads"] += 1
        if offset >= nxt:
            return [], offset
        if tag is None:
            count = max_messages
        else:
            steps = min(TAG_SCAN_LIMIT // TAG_SCAN_STEP, -(-(nxt - offset) // TAG_SCAN_STEP))
            count = steps * TAG_SCAN_STEP
        entries = q.read(offset, count)
        scan_end = offset + len(entries)
        rows = Rows(
            topic,
            partition,
            np.arange(offset, scan_end, dtype=np.int64),
            entries["pos"].astype(np.int64),
            entries["size"].astype(np.int64),
        )
        want: bytes | None = None
        if tag is not None:
            want = tag.encode()
            rows = rows[np.flatnonzero(entries["tag"] == np.uint64(tag_hash(want)))]
        sizes = rows.sizes
        memo = memo or SpanMemo()
        parts: list[ReadBatch] = []
        taken = 0
        value_bytes = 0
        ratio = 1.0  # value bytes per entry byte (at most 1): how far one step reaches
        i, n = 0, len(sizes)
        while i < n:
            need = max_messages - taken
            # a step: the rows whose values surely (then, by the estimate, likely) fit
            reach = np.cumsum(sizes[i : i + need]) * ratio
            j = i + min(
                len(reach), int(np.searchsorted(reach, (max_bytes - value_bytes) * 1.1)) + 1
            )
            got = decode_rows(self.log, rows[i:j], want, memo)
            step = got.parts
            if len(step) == 1:
                lens = step[0].values.lens
            else:
                lens = np.concatenate([p.values.lens for p in step] or [np.zeros(0, np.int64)])
            fit = int(np.searchsorted(np.cumsum(lens) + value_bytes, max_bytes, side="right"))
            if taken == 0 and fit == 0 and len(lens):
                fit = 1  # at least one message
            k = min(fit, need)
            if k:
                for part in head_of_parts(step, k):
                    parts.append(part)
                    value_bytes += part.value_bytes
                taken += k
            if fit < need and fit < len(lens):  # the next value would pass max_bytes
                return parts, offset_of_row(step, fit)
            if taken >= max_messages:
                return parts, int(parts[-1].offsets[-1]) + 1
            if got.error is not None:
                raise got.error
            if got.ok:
                step_bytes = sum(p.value_bytes for p in step)
                ratio = max(0.01, min(1.0, step_bytes / max(1, int(got.scanned_sizes.sum()))))
            i = j
        return parts, scan_end

    def fetch_columns(
        self,
        topic: str,
        offsets: dict[int, int | None],
        max_messages: int = 100,
        max_bytes: int = 1 << 20,
        tag: str | None = None,
    ) -> dict[int, ReadBatch]:
        """``read_columns`` of several partitions ({partition: offset}, None = the first
        kept), each with its own limits, sharing one ``SpanMemo``: a frame that holds rows of
        several of them is fetched and checked once (a multi-partition fetch)."""
        starts: dict[int, int] = {}
        at: dict[int, int] = {}  # where each read starts in the log
        for p, offset in offsets.items():
            _cfg, q = self.partition(topic, p)
            starts[p] = q.first_offset if offset is None else offset
            inside = isinstance(starts[p], int) and q.first_offset <= starts[p] < q.next_offset
            at[p] = q.entries(starts[p], 1)[0][0] if inside else 0
        # the read starting first in the log fetches the spans the others then find
        memo = SpanMemo()
        pages = {
            p: self.read_columns(topic, p, starts[p], max_messages, max_bytes, tag, memo)
            for p in sorted(starts, key=at.__getitem__)
        }
        return {p: pages[p] for p in offsets}

    def _read_entry(self, pos: int, size: int, topic: str, partition: int, offset: int) -> Record:
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
        self.check_open()
        self.topics.get(topic)
        if not isinstance(key, str):
            raise InvalidArgument("key must be a string")
        begin_ms = check_int("begin_ms", begin_ms, 0, 2**63 - 1)
        end_ms = check_int("end_ms", end_ms, 0, 2**63 - 1)
        max_count = check_int("max_count", max_count, 1, MAX_LOOKUP)
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
                and self.topics.visible(topic, pos)  # not of a deleted incarnation
            ):
                out.append(to_message(rec))
                if len(out) >= max_count:
                    return LookupResult(out, True)
        return LookupResult(out, False)

    def get_message(self, msg_id: str) -> Message:
        self.check_open()
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
        self.check_open()
        _cfg, q = self.partition(topic, partition)
        ts_ms = check_int("timestamp", ts_ms, -(2**63), 2**63 - 1)
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
