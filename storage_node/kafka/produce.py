"""Produce (key 0) and InitProducerId (key 22).

Each partition's batch is checked whole (records.decode_batch), then appended through the
partition service (the distinct partitions of one request at once), as the HTTP produce route is: the partition must be led here
(NOT_LEADER_OR_FOLLOWER otherwise), the store group-commits it (in ``sync`` flush mode the
answer waits for the fsync), and acks=all (-1) also waits until the log's ``minInSync``
replicas hold it, as a ``sync`` HTTP append does. acks=1 answers once this node stored it;
acks=0 gets no answer at all.

Idempotent producers: InitProducerId hands out an id unique in the cluster (the time in ms
shifted left 8 bits, plus the broker id), and a batch that carries one is appended under the
store's own idempotent-producer table, as producer ``k<id>.<epoch>.<partition>.<topic>``
with the batch's base sequence: a retried batch gets the first answer (its base offset)
and is not written again, after a restart and a failover too (the table is rebuilt from the
log). Sequences are not required to be gap-free (no OUT_OF_ORDER_SEQUENCE_NUMBER).
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import threading
import time
from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.errors import InvalidArgument, MsgStoreError, NotEnoughReplicas
from storage_node.formats.packed import filled
from storage_node.kafka.errors import error_code, error_message
from storage_node.kafka.records import CorruptBatch, UnsupportedBatch, decode_batch
from storage_node.kafka.registry import Api, ApiTable, RequestContext

log = logging.getLogger("msgstore.kafka")
NO_THROTTLE = datetime.timedelta(0)


def store_producer(producer_id: int, epoch: int, partition: int, topic: str) -> str:
    """The store's idempotent-producer name of a Kafka producer's partition."""
    name = f"k{producer_id}.{epoch}.{partition}.{topic}"
    if len(name) > 200:  # the name rule's limit: a long topic is named by its hash
        digest = hashlib.sha256(topic.encode()).hexdigest()[:32]
        name = f"k{producer_id}.{epoch}.{partition}.{digest}"
    return name


async def produce_partition(
    ctx: RequestContext, topic: str, partition: int, records: Any, acks: int
) -> int:
    """Append one partition's batch through the partition service; its base offset."""
    service = ctx.node.partitions
    service.check_writable()
    cfg = await service.topic_config(topic)
    if not 0 <= partition < cfg.partitions:
        raise UnknownPartition(f"topic {topic!r} has no partition {partition}")
    service.leader_store(topic, partition)  # NotLeader before the batch is even read
    if records is None:
        raise CorruptBatch("the partition's records are null")
    batch = decode_batch(records)
    packed = batch.packed
    packed.partitions = filled(len(packed), partition)
    producer = sequence = None
    if batch.producer_id >= 0:
        producer = store_producer(batch.producer_id, batch.producer_epoch, partition, topic)
        sequence = batch.base_sequence
    done = await service.append(topic, packed, producer, sequence, wait_replicas=acks == -1)
    return int(done.result.offset_array[0])


class UnknownPartition(MsgStoreError):
    code = "unknown_partition"
    status = 404


def _code(exc: BaseException) -> ErrorCode:
    if isinstance(exc, CorruptBatch):
        return ErrorCode.corrupt_message
    if isinstance(exc, UnsupportedBatch):
        return ErrorCode.unsupported_for_message_format
    if isinstance(exc, UnknownPartition):
        return ErrorCode.unknown_topic_or_partition
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

    async def answer(topic: str, pdata: Any) -> Any:
        code, base, message = ErrorCode.none, -1, None
        if bad is not None:
            code, message = bad, reason
        elif not ctx.guard.topic(topic):  # WRITE on the topic (kafka.acl)
            code, message = ErrorCode.topic_authorization_failed, f"may not write {topic}"
        else:
            try:
                base = await produce_partition(ctx, topic, int(pdata.index), pdata.records, acks)
            except MsgStoreError as exc:
                code, message = _code(exc), error_message(exc)
                log.info("kafka produce to %s/%s: %s", topic, pdata.index, message)
        return ctx.make(
            "PartitionProduceResponse",
            index=pdata.index,
            error_code=code,
            base_offset=base,
            log_append_time=None,
            log_start_offset=-1,
            record_errors=(),
            error_message=message,
        )

    jobs = [(t.name, p) for t in request.topic_data for p in t.partition_data]
    named = [(name, int(p.index)) for name, p in jobs]
    if len(set(named)) == len(named):
        # distinct partitions are appended at once, so the store group-commits them together
        # instead of one after the other (each partition's order is its own batch's)
        answers = list(await asyncio.gather(*(answer(name, p) for name, p in jobs)))
    else:  # a partition named twice: its batches in the request's order
        answers = [await answer(name, p) for name, p in jobs]
    topics = []
    at = 0
    for topic_data in request.topic_data:
        count = len(topic_data.partition_data)
        parts = tuple(answers[at : at + count])
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
