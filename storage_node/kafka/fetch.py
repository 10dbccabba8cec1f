"""Fetch (key 1): pages of partitions as record batches, with Kafka's long poll.

Each partition led here is read with the store's columnar read from the fetch offset (at
most ``partition_max_bytes`` of values, and the request's ``max_bytes`` over all), its rows
encoded as one v2 batch (records.encode_batch). The partitions of one store share what was
read of its log (a ``SpanMemo``): partitions written together lie in the same frames, so the
log bytes of a fetch of six partitions are read once, not six times. When fewer than ``min_bytes`` came back the
answer waits, up to ``max_wait_ms``, for an append to one of the partitions and reads again,
as the HTTP fetch does. Fetch sessions (KIP-227) are declined: every answer has session id 0,
so clients send full fetches. The high watermark is the partition's next offset on the
leader; the log start offset its first.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.errors import MsgStoreError
from storage_node.formats.limits import MAX_READ_MESSAGES
from storage_node.kafka.errors import epoch_check, error_code
from storage_node.kafka.records import encode_batch
from storage_node.kafka.registry import Api, ApiTable, RequestContext
from storage_node.store.columnar import ReadBatch, SpanMemo

NO_THROTTLE = datetime.timedelta(0)
MAX_WAIT_MS = 30_000


@dataclass
class Wanted:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    store: Any = None
    error: ErrorCode = ErrorCode.none
    first: int = -1
    high: int = -1
    records: bytes | bytearray = b""
    events: list[asyncio.Event] = field(default_factory=list)


def encode_page(page: ReadBatch) -> bytes | bytearray:
    """One v2 batch of a columnar page (empty bytes for no rows)."""
    if not len(page):
        return b""
    return encode_batch(
        int(page.offsets[0]),
        page.offsets,
        page.timestamps,
        page.keys,
        page.values,
        page.tags,
        page.msg_ids,
        page.headers,
    )


def read_all(wanted: list[Wanted], max_bytes: int) -> int:
    """(In a thread.) Read every partition that has no error; returns the bytes read."""
    budget = max(1, max_bytes)
    total = 0
    offsets: dict[tuple[int, str], list[tuple[int, int]]] = {}
    memos: dict[int, SpanMemo] = {}  # per store: the log bytes its partitions share
    for w in wanted:
        if w.error != ErrorCode.none:
            continue
        key = (id(w.store), w.topic)
        if key not in offsets:
            offsets[key] = w.store.partition_offsets(w.topic)
        w.first, w.high = offsets[key][w.partition]
        if w.offset == w.high or budget <= 0:
            w.records = b""
            continue
        try:
            page = w.store.read_columns(
                w.topic,
                w.partition,
                w.offset,
                MAX_READ_MESSAGES,
                min(w.max_bytes, budget),
                memo=memos.setdefault(id(w.store), SpanMemo()),
            )
        except MsgStoreError as exc:
            w.error = error_code(exc)
            continue
        w.records = encode_page(page)
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
    wait_ms = min(int(request.max_wait.total_seconds() * 1000), MAX_WAIT_MS)
    deadline = time.monotonic() + wait_ms / 1000
    min_bytes = int(request.min_bytes)
    max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
    while True:
        events = [service.events.event(w.topic, w.partition) for w in wanted if w.store is not None]
        got = await service.in_thread(read_all, wanted, max_bytes)
        left = deadline - time.monotonic()
        if got >= min_bytes or left <= 0 or not events:
            break
        if any(w.error != ErrorCode.none for w in wanted):
            break  # an error answers at once, as Kafka does
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        if not any(e.is_set() for e in events):
            break
    return _answer(ctx, wanted, ErrorCode.none)


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
