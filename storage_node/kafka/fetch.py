"""Fetch (key 1): pages of partitions as record batches, with Kafka's long poll.

Each partition led here is read with the store's columnar read from the fetch offset (at
most ``partition_max_bytes`` of values, and the request's ``max_bytes`` over all), its rows
encoded as v2 batches (records.encode_batch), one per span of log bytes the page lies in
(``Store.read_column_parts``), sent one after another without being joined. The partitions of one store share what was
read of its log (a ``SpanMemo``): partitions written together lie in the same frames, so the
log bytes of a fetch of six partitions are read once, not six times. When fewer than ``min_bytes`` came back the
answer waits, up to ``max_wait_ms``, for an append to one of the partitions and reads again,
as the HTTP fetch does. Fetch sessions (KIP-227) are declined: every answer has session id 0,
so clients send full fetches. The high watermark is the partition's next offset on the
leader; the log start offset its first.

Read-ahead. A consumer that is behind fetches the same partitions again from where the last
answer ended, as soon as it has that answer. So when an answer leaves records behind in
one of its partitions, the next page of every partition is read at once, in the pool,
while the answer is sent and the client works through it (``ReadAhead``, one per
connection). The next Fetch takes it when it asks exactly that (the same partitions,
offsets and limits), after the same checks as any Fetch (ACL, leader, epoch); the answer's
log start offset and high watermark are read anew, and a read-ahead whose pages the
partition no longer holds (retention moved past them, the log was cut) or that is older
than READ_AHEAD_MAX_AGE_S is dropped and read again. The answers held ahead take at most
READ_AHEAD_MAX_BYTES of the node's memory (estimated by the answer before them). A
connection whose Fetches keep asking something else (a client that fetches other subsets
of its partitions each time) reads ahead less and less often: after n misses in a row, not
for the next 2**n Fetches (at most 64).
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.errors import MsgStoreError
from storage_node.formats.limits import MAX_READ_MESSAGES
from storage_node.kafka.errors import epoch_check, error_code
from storage_node.kafka.records import RecordBatches, encode_batch
from storage_node.kafka.registry import Api, ApiTable, RequestContext
from storage_node.partitions import PartitionService
from storage_node.store import Store
from storage_node.store.columnar import ReadBatch, SpanMemo

NO_THROTTLE = datetime.timedelta(0)
MAX_WAIT_MS = 30_000
READ_AHEAD_MAX_AGE_S = 5.0
READ_AHEAD_MAX_BYTES = 64 << 20  # answers read ahead, over all connections of the node
MEMO_KEEP_BYTES = 64 << 20  # log bytes a connection keeps from one Fetch for the next
MEMO_KEEP_MAX = 128 << 20  # the same, over all connections of the node


@dataclass
class Wanted:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    store: Store | None = None
    error: ErrorCode = ErrorCode.none
    first: int = -1
    high: int = -1
    next: int = -1  # where the answer's page ended (the next fetch offset)
    records: bytes | RecordBatches = b""
    events: list[asyncio.Event] = field(default_factory=list)


def encode_page(parts: list[ReadBatch]) -> bytes | RecordBatches:
    """A v2 batch of each part of a columnar page (empty bytes for no rows)."""
    batches = [
        encode_batch(
            int(page.offsets[0]),
            page.offsets,
            page.timestamps,
            page.keys,
            page.values,
            page.tags,
            page.msg_ids,
            page.headers,
        )
        for page in parts
        if len(page)
    ]
    return RecordBatches(batches) if batches else b""


class KeptSpans:
    """A connection's log bytes read by its last Fetch, per store, for its next one."""

    held = 0  # bytes kept over all connections of the node (MEMO_KEEP_MAX)
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.memos: dict[int, tuple[Store, SpanMemo, int]] = {}  # id(store): (store, memo, size)
        self.closed = False  # the connection ended: a read still running keeps nothing

    def take(self, store: Store) -> SpanMemo:
        """The memo kept for ``store`` (a new one if none); it is not kept meanwhile, so two
        reads of one connection never share one."""
        with KeptSpans._lock:
            got = self.memos.pop(id(store), None)
            if got is None:
                return SpanMemo()
            KeptSpans.held -= got[2]
        return got[1] if got[0] is store else SpanMemo()

    def give(self, store: Store, memo: SpanMemo) -> None:
        """Keep ``memo`` for the next Fetch, trimmed to what the node's budget allows."""
        with KeptSpans._lock:
            if self.closed:
                return
            memo.trim(min(MEMO_KEEP_BYTES, MEMO_KEEP_MAX - KeptSpans.held))
            old = self.memos.pop(id(store), None)
            if old is not None:
                KeptSpans.held -= old[2]
            if memo.size:
                self.memos[id(store)] = (store, memo, memo.size)
                KeptSpans.held += memo.size

    def clear(self) -> None:
        """Drop every memo (the connection ended); later ``give``s keep nothing."""
        with KeptSpans._lock:
            self.closed = True
            for _, _, size in self.memos.values():
                KeptSpans.held -= size
            self.memos.clear()


def read_all(wanted: list[Wanted], max_bytes: int, kept: KeptSpans | None = None) -> int:
    """(In a thread.) Read every partition that has no error; returns the bytes read. With
    ``kept``, the log bytes read are taken from and given back to the connection's memos."""
    memos: dict[int, tuple[Store, SpanMemo]] = {}  # per store: the log bytes its partitions share
    try:
        return _read_all(wanted, max_bytes, kept, memos)
    finally:
        if kept is not None:
            for store, memo in memos.values():
                kept.give(store, memo)


def _read_all(
    wanted: list[Wanted],
    max_bytes: int,
    kept: KeptSpans | None,
    memos: dict[int, tuple[Store, SpanMemo]],
) -> int:
    budget = max(1, max_bytes)
    total = 0
    offsets: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for w in wanted:
        if w.error != ErrorCode.none:
            continue
        store = w.store
        assert store is not None  # a partition without an error has the store leading it
        key = (id(store), w.topic)
        if key not in offsets:
            offsets[key] = store.partition_offsets(w.topic)
        w.first, w.high = offsets[key][w.partition]
        if w.offset == w.high or budget <= 0:
            w.records, w.next = b"", w.offset
            continue
        held = memos.get(id(store))
        if held is None:
            memo = kept.take(store) if kept is not None else SpanMemo()
            held = memos[id(store)] = (store, memo)
        try:
            parts, w.next = store.read_column_parts(
                w.topic,
                w.partition,
                w.offset,
                MAX_READ_MESSAGES,
                min(w.max_bytes, budget),
                memo=held[1],
            )
        except MsgStoreError as exc:
            w.error = error_code(exc)
            continue
        w.records = encode_page(parts)
        budget -= len(w.records)
        total += len(w.records)
    return total


async def handle(ctx: RequestContext, request: Any) -> Any:
    service = ctx.node.partitions
    if int(getattr(request, "session_id", 0)) != 0:
        return _answer(ctx, [], ErrorCode.fetch_session_id_not_found)
    wanted: list[Wanted] = []
    for t in request.topics:
        for p in t.partitions:
            w = Wanted(t.topic, int(p.partition), int(p.fetch_offset), int(p.partition_max_bytes))
            wanted.append(w)
            if not ctx.guard.topic(w.topic):  # READ on the topic (kafka.acl)
                w.error = ErrorCode.topic_authorization_failed
                continue
            try:
                cfg = await service.topic_config(w.topic)
                if not 0 <= w.partition < cfg.partitions:
                    w.error = ErrorCode.unknown_topic_or_partition
                    continue
                w.store = service.leader_store(w.topic, w.partition)
                w.error = epoch_check(ctx.node, w.topic, cfg.partitions, w.partition, p)
            except MsgStoreError as exc:
                w.error = error_code(exc)
    max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
    ahead = ReadAhead.take(ctx, wanted, max_bytes)
    if ahead is None or not await ahead.answer(wanted, int(request.min_bytes)):
        await read_or_wait(service, wanted, request, max_bytes, kept_spans(ctx))
    ReadAhead.start(ctx, wanted, max_bytes)
    return _answer(ctx, wanted, ErrorCode.none)


def kept_spans(ctx: RequestContext) -> KeptSpans | None:
    """The connection's kept log bytes (None for a request from no connection)."""
    conn = ctx.connection
    if conn is None:
        return None
    if conn.spans is None:
        conn.spans = KeptSpans()
    assert isinstance(conn.spans, KeptSpans)
    return conn.spans


async def read_or_wait(
    service: PartitionService,
    wanted: list[Wanted],
    request: Any,
    max_bytes: int,
    kept: KeptSpans | None,
) -> None:
    """Read every partition; when less than ``min_bytes`` came, wait (up to ``max_wait``)
    for an append to one of them and read again."""
    wait_ms = min(int(request.max_wait.total_seconds() * 1000), MAX_WAIT_MS)
    deadline = time.monotonic() + wait_ms / 1000
    min_bytes = int(request.min_bytes)
    while True:
        events = [service.events.event(w.topic, w.partition) for w in wanted if w.store is not None]
        got = await service.in_thread(read_all, wanted, max_bytes, kept)
        left = deadline - time.monotonic()
        if got >= min_bytes or left <= 0 or not events:
            return
        if any(w.error != ErrorCode.none for w in wanted):
            return  # an error answers at once, as Kafka does
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        if not any(e.is_set() for e in events):
            return


class ReadAhead:
    """The next pages of a connection's partitions, read while its last answer is sent."""

    held_bytes = 0  # estimated bytes of every ReadAhead not yet taken (READ_AHEAD_MAX_BYTES)

    def __init__(self, key: tuple[Any, ...], wanted: list[Wanted], estimate: int) -> None:
        self.key = key
        self.wanted = wanted
        self.estimate = estimate
        self.started = time.monotonic()
        self.task: asyncio.Future[int] | None = None
        ReadAhead.held_bytes += estimate

    @staticmethod
    def key_of(wanted: list[Wanted], max_bytes: int) -> tuple[Any, ...]:
        return (
            max_bytes,
            *((w.topic, w.partition, w.offset, w.max_bytes, id(w.store)) for w in wanted),
        )

    @classmethod
    def start(cls, ctx: RequestContext, wanted: list[Wanted], max_bytes: int) -> None:
        """After an answer that left records behind and has no error: read the next pages."""
        conn = ctx.connection
        if conn is None or any(w.error != ErrorCode.none for w in wanted):
            return
        if conn.read_ahead_skip > 0:
            conn.read_ahead_skip -= 1
            return
        if not any(0 <= w.next < w.high for w in wanted):
            return  # nothing left behind: the consumer is caught up (its next Fetch waits)
        estimate = sum(len(w.records) for w in wanted)
        if cls.held_bytes + estimate > READ_AHEAD_MAX_BYTES:
            return
        nxt = [Wanted(w.topic, w.partition, w.next, w.max_bytes, w.store) for w in wanted]
        ahead = cls(cls.key_of(nxt, max_bytes), nxt, estimate)
        ahead.task = asyncio.ensure_future(
            ctx.node.partitions.in_thread(read_all, nxt, max_bytes, kept_spans(ctx))
        )
        conn.read_ahead = ahead

    @classmethod
    def take(cls, ctx: RequestContext, wanted: list[Wanted], max_bytes: int) -> ReadAhead | None:
        """The connection's read-ahead if this Fetch asks exactly what it read (and no
        partition of it has an error); it is dropped either way."""
        conn = ctx.connection
        ahead = None if conn is None else conn.read_ahead
        if conn is None or ahead is None:
            return None
        conn.read_ahead = None
        if ahead.key != cls.key_of(wanted, max_bytes):
            conn.read_ahead_misses += 1
            conn.read_ahead_skip = min(64, 2**conn.read_ahead_misses)
            ahead.cancel()
            return None
        conn.read_ahead_misses = 0
        fresh = time.monotonic() - ahead.started <= READ_AHEAD_MAX_AGE_S
        if not fresh or any(w.error != ErrorCode.none for w in wanted):
            ahead.cancel()
            return None
        return ahead

    async def answer(self, wanted: list[Wanted], min_bytes: int) -> bool:
        """Fill ``wanted`` from the pages read ahead: False (nothing filled) when they hold
        fewer than ``min_bytes`` (at least one), failed, or the partitions no longer hold
        them."""
        try:
            assert self.task is not None
            got = await self.task
        except Exception:  # noqa: BLE001 - a failed read-ahead is read again, and fails there
            return False
        finally:
            self.release()
        if got < max(1, min_bytes) or any(w.error != ErrorCode.none for w in self.wanted):
            return False
        offsets: dict[tuple[int, str], list[tuple[int, int]]] = {}
        for w in self.wanted:
            store = w.store
            assert store is not None  # none of them has an error (checked above)
            key = (id(store), w.topic)
            try:
                if key not in offsets:
                    offsets[key] = store.partition_offsets(w.topic)
            except MsgStoreError:
                return False
            first, high = offsets[key][w.partition]
            if first > w.offset or high < w.next:  # retention or a cut log passed them
                return False
        for w, a in zip(wanted, self.wanted, strict=True):
            w.first, w.high = offsets[(id(a.store), a.topic)][a.partition]
            w.records, w.next = a.records, a.next
        return True

    def release(self) -> None:
        if self.estimate:
            ReadAhead.held_bytes -= self.estimate
            self.estimate = 0

    def cancel(self) -> None:
        task = self.task
        if task is not None:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: a failed read-ahead is not reported
            task.cancel()  # a read already running finishes in the pool, unused
        self.release()


def _answer(ctx: RequestContext, wanted: list[Wanted], top: ErrorCode) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for w in wanted:
        by_topic.setdefault(w.topic, []).append(
            ctx.make(
                "PartitionData",
                partition_index=w.partition,
                error_code=w.error,
                high_watermark=w.high,
                last_stable_offset=w.high,
                log_start_offset=w.first,
                aborted_transactions=None,
                preferred_read_replica=-1,
                # empty, never null, for an error (as Kafka sends it): librdkafka rejects a
                # whole answer with a null partition (MessageSetSize -1) and fetches again
                records=w.records if w.error == ErrorCode.none else b"",
            )
        )
    return ctx.make(
        "FetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=top,
        session_id=0,
        responses=tuple(
            ctx.make("FetchableTopicResponse", topic=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


def register(table: ApiTable) -> None:
    table.add(Api(key=1, name="Fetch", min_version=4, max_version=12, handler=handle))
