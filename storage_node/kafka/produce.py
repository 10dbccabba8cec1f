"""Produce (key 0) and InitProducerId (key 22).

Each partition's batch is checked whole (records.decode_batch), then appended through the
partition service, as the HTTP produce route is; the plain batches of one request that go to
one store are appended as one batch (``append_together``). The partition must be led here
(NOT_LEADER_OR_FOLLOWER otherwise), the store group-commits it (in ``sync`` flush mode the
answer waits for the fsync), and acks=all (-1) also waits until the log's ``minInSync``
replicas hold it, as a ``sync`` HTTP append does. acks=1 answers once this node stored it;
acks=0 gets no answer at all.

Idempotent producers: InitProducerId hands out an id unique in the cluster (the time in ms
shifted left 8 bits, plus the broker id), and a batch that carries one is appended under the
store's own idempotent-producer table, as producer ``k<id>.<epoch>.<partition>.<topic>``
with the batch's base sequence: a retried batch gets the first answer (its base offset)
and is not written again, after a restart and a failover too (the table is rebuilt from the
log). Sequences must follow on (``check_sequence``): a batch that neither continues the
producer's last remembered batch nor repeats a remembered one is OUT_OF_ORDER_SEQUENCE_NUMBER,
and a batch of an older epoch than one the partition has taken is INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.errors import (
    DuplicateMessageId,
    InvalidArgument,
    MessageTooLarge,
    MsgStoreError,
    NotEnoughReplicas,
)
from storage_node.formats.packed import filled, merge_batches
from storage_node.kafka.errors import error_code, error_message
from storage_node.kafka.records import (
    CorruptBatch,
    IncomingBatch,
    UnsupportedBatch,
    decode_batch,
)
from storage_node.kafka.registry import Api, ApiTable, RequestContext
from storage_node.store import Store

log = logging.getLogger("msgstore.kafka")
NO_THROTTLE = datetime.timedelta(0)


def store_producer(producer_id: int, epoch: int, partition: int, topic: str) -> str:
    """The store's idempotent-producer name of a Kafka producer's partition."""
    name = f"k{producer_id}.{epoch}.{partition}.{topic}"
    if len(name) > 200:  # the name rule's limit: a long topic is named by its hash
        digest = hashlib.sha256(topic.encode()).hexdigest()[:32]
        name = f"k{producer_id}.{epoch}.{partition}.{digest}"
    return name


# what the store says of a batch's records before it writes any of them
REFUSED_RECORDS = (InvalidArgument, MessageTooLarge, DuplicateMessageId)


@dataclass
class Produced:
    """One partition's batch of a Produce request on its way to an answer."""

    topic: str
    partition: int
    code: ErrorCode = ErrorCode.none
    base: int = -1
    message: str | None = None
    batch: IncomingBatch | None = None
    store: Store | None = None

    def fail(self, exc: MsgStoreError) -> None:
        self.code, self.message = _code(exc), error_message(exc)
        log.info("kafka produce to %s/%s: %s", self.topic, self.partition, self.message)


async def prepare(ctx: RequestContext, item: Produced, records: Any) -> None:
    """Check a partition's batch and read it (nothing is stored): ``item.batch`` and the
    store that leads the partition, or ``item``'s error."""
    service = ctx.node.partitions
    try:
        service.check_writable()
        cfg = await service.topic_config(item.topic)
        if not 0 <= item.partition < cfg.partitions:
            raise UnknownPartition(f"topic {item.topic!r} has no partition {item.partition}")
        item.store = service.leader_store(item.topic, item.partition)  # before the batch is read
        if records is None:
            raise CorruptBatch("the partition's records are null")
        item.batch = decode_batch(records)
        item.batch.packed.partitions = filled(len(item.batch), item.partition)
    except MsgStoreError as exc:
        item.fail(exc)


async def append_one(ctx: RequestContext, item: Produced, acks: int) -> None:
    """Append one prepared batch through the partition service (an idempotent producer's
    after its sequence check)."""
    service = ctx.node.partitions
    batch = item.batch
    assert batch is not None
    producer = sequence = None
    try:
        if batch.producer_id >= 0:
            producer = store_producer(
                batch.producer_id, batch.producer_epoch, item.partition, item.topic
            )
            sequence = batch.base_sequence
            await service.in_thread(
                check_sequence, item.store, batch, item.partition, item.topic, producer
            )
        done = await service.append(
            item.topic, batch.packed, producer, sequence, wait_replicas=acks == -1
        )
        item.base = int(done.result.offset_array[0])
    except MsgStoreError as exc:
        item.fail(exc)


async def append_together(ctx: RequestContext, items: list[Produced], acks: int) -> None:
    """Append the plain (not idempotent) batches of one topic bound for one store as one
    batch: one trip to the store's writer for the request instead of one per partition,
    which is most of a small batch's cost. Should the store refuse the records, each
    partition's batch goes on its own, so one partition's bad record fails only that one."""
    if len(items) == 1:
        await append_one(ctx, items[0], acks)
        return
    joined = merge_batches([i.batch.packed for i in items if i.batch is not None])
    try:
        done = await ctx.node.partitions.append(
            items[0].topic, joined, None, None, wait_replicas=acks == -1
        )
    except REFUSED_RECORDS:  # checked before anything is written: nothing was stored
        await asyncio.gather(*(append_one(ctx, i, acks) for i in items))
        return
    except MsgStoreError as exc:
        for i in items:
            i.fail(exc)
        return
    offsets = done.result.offset_array
    at = 0
    for i in items:
        i.base = int(offsets[at])
        at += len(i.batch) if i.batch is not None else 0


async def append_all(ctx: RequestContext, items: list[Produced], acks: int) -> None:
    """Append every prepared batch of a request. Distinct partitions are appended at once,
    so the store writes them together; a partition named twice has its batches appended in
    the request's order."""
    ready = [i for i in items if i.batch is not None]
    if len({(i.topic, i.partition) for i in ready}) != len(ready):
        for item in ready:
            await append_one(ctx, item, acks)
        return
    together: dict[tuple[str, int], list[Produced]] = {}
    alone: list[Produced] = []
    for item in ready:
        assert item.batch is not None
        if item.batch.producer_id >= 0:
            alone.append(item)
        else:
            together.setdefault((item.topic, id(item.store)), []).append(item)
    await asyncio.gather(
        *(append_one(ctx, i, acks) for i in alone),
        *(append_together(ctx, group, acks) for group in together.values()),
    )


class UnknownPartition(MsgStoreError):
    code = "unknown_partition"
    status = 404


class OutOfOrderSequence(MsgStoreError):
    code = "out_of_order_sequence"
    status = 409


class StaleProducerEpoch(MsgStoreError):
    code = "stale_producer_epoch"
    status = 409


SEQUENCE_WRAP = 2**31  # Kafka's sequences wrap at Int32.MaxValue


# per store: (producer id, partition, topic) -> the newest epoch it has taken, so the
# table is scanned once per producer and partition, not per batch
_EPOCHS: weakref.WeakKeyDictionary[Any, dict[tuple[int, int, str], int]] = (
    weakref.WeakKeyDictionary()
)
MAX_EPOCHS_KEPT = 100_000


def newest_epoch(store: Store, producer_id: int, partition: int, topic: str) -> int:
    """(Blocking.) The newest epoch of a producer id whose batches the partition's log
    remembers (-1: none), from the store's idempotency table (part of the log)."""
    kept = _EPOCHS.setdefault(store, {})
    found = kept.get((producer_id, partition, topic))
    if found is not None:
        return found
    if len(kept) > MAX_EPOCHS_KEPT:
        kept.clear()
    name = store_producer(producer_id, 0, partition, topic)
    head, tail = f"k{producer_id}.", name[name.index(".", len(f"k{producer_id}.")) :]
    newest = -1
    for known in store.producer_ids():
        if known.startswith(head) and known.endswith(tail):
            epoch = known[len(head) : len(known) - len(tail)]
            if epoch.isdigit():
                newest = max(newest, int(epoch))
    kept[producer_id, partition, topic] = newest
    return newest


def check_sequence(store: Store, batch: Any, partition: int, topic: str, producer: str) -> None:
    """(Blocking.) Refuse a batch Kafka's broker refuses: an epoch older than one the
    partition has taken, or a sequence that neither repeats a remembered batch nor follows
    the last one. A producer the table remembers nothing of may start anywhere (its first
    batch, or one whose batches the table has forgotten)."""
    epoch = batch.producer_epoch
    newest = newest_epoch(store, batch.producer_id, partition, topic)
    if epoch < newest:
        raise StaleProducerEpoch(
            f"producer {batch.producer_id} epoch {epoch} is older than epoch {newest}"
        )
    _EPOCHS[store][batch.producer_id, partition, topic] = epoch
    known, last = store.producer_batch(producer, batch.base_sequence)
    if known or last is None:
        return  # a retry (answered with its first result), or nothing to follow
    expected = (last[0] + last[1]) % SEQUENCE_WRAP
    if batch.base_sequence != expected:
        raise OutOfOrderSequence(
            f"sequence {batch.base_sequence} of producer {batch.producer_id} epoch {epoch} "
            f"does not follow {last[0]} ({last[1]} records): expected {expected}"
        )


def _code(exc: BaseException) -> ErrorCode:
    if isinstance(exc, CorruptBatch):
        return ErrorCode.corrupt_message
    if isinstance(exc, UnsupportedBatch):
        return ErrorCode.unsupported_for_message_format
    if isinstance(exc, UnknownPartition):
        return ErrorCode.unknown_topic_or_partition
    if isinstance(exc, OutOfOrderSequence):
        return ErrorCode.out_of_order_sequence_number
    if isinstance(exc, StaleProducerEpoch):
        return ErrorCode.invalid_producer_epoch
    if isinstance(exc, NotEnoughReplicas):  # the store wrote it; too few copies hold it
        return ErrorCode.not_enough_replicas_after_append
    return error_code(exc)


async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    acks = int(request.acks)
    if request.transactional_id is not None:
        bad: ErrorCode | None = ErrorCode.transactional_id_authorization_failed
        reason: str | None = "transactions are not supported"
    elif acks not in (-1, 0, 1):
        bad, reason = ErrorCode.invalid_required_acks, f"acks must be -1, 0 or 1, not {acks}"
    else:
        bad = reason = None

    items: list[Produced] = []
    for t in request.topic_data:
        for pdata in t.partition_data:
            item = Produced(t.name, int(pdata.index))
            items.append(item)
            if bad is not None:
                item.code, item.message = bad, reason
            elif not ctx.guard.topic(t.name):  # WRITE on the topic (kafka.acl)
                item.code = ErrorCode.topic_authorization_failed
                item.message = f"may not write {t.name}"
            else:
                await prepare(ctx, item, pdata.records)
    await append_all(ctx, items, acks)
    topics = []
    at = 0
    for topic_data in request.topic_data:
        count = len(topic_data.partition_data)
        parts = tuple(
            ctx.make(
                "PartitionProduceResponse",
                index=i.partition,
                error_code=i.code,
                base_offset=i.base,
                log_append_time=None,
                log_start_offset=-1,
                record_errors=(),
                error_message=i.message,
            )
            for i in items[at : at + count]
        )
        at += count
        topics.append(
            ctx.make("TopicProduceResponse", name=topic_data.name, partition_responses=parts)
        )
    if acks == 0:
        return None
    return ctx.make("ProduceResponse", responses=tuple(topics), throttle_time=NO_THROTTLE)


class ProducerIds:
    """Producer ids unique in the cluster and across restarts: the time in ms shifted left
    8 bits plus the broker id (0..255), never repeated within the process."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self, broker_id: int) -> int:
        with self._lock:
            pid = (int(time.time() * 1000) << 8) | (broker_id & 0xFF)
            if pid <= self._last:
                pid = self._last + 256
            self._last = pid
            return pid


PRODUCER_IDS = ProducerIds()


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    refused = None
    if request.transactional_id is not None:
        refused = ErrorCode.transactional_id_authorization_failed
    elif not ctx.guard.any_topic("idempotent producer"):  # WRITE on some topic (kafka.acl)
        refused = ErrorCode.cluster_authorization_failed
    if refused is not None:
        return ctx.make(
            "InitProducerIdResponse",
            throttle_time=NO_THROTTLE,
            error_code=refused,
            producer_id=-1,
            producer_epoch=-1,
        )
    previous = int(getattr(request, "producer_id", -1))
    if previous >= 0:  # KIP-360: the same producer asks again: a new epoch
        epoch = int(request.producer_epoch) + 1
        if epoch > 32767:
            raise InvalidArgument("producer epoch exhausted")
        pid = previous
    else:
        pid, epoch = PRODUCER_IDS.next(ctx.node.broker_id), 0
    return ctx.make(
        "InitProducerIdResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=pid,
        producer_epoch=epoch,
    )


def register(table: ApiTable) -> None:
    table.add(Api(key=0, name="Produce", min_version=3, max_version=9, handler=handle_produce))
    table.add(
        Api(
            key=22,
            name="InitProducerId",
            min_version=0,
            max_version=4,
            handler=handle_init_producer_id,
        )
    )
