"""ListOffsets (key 2): a partition's earliest (-2) or latest (-1) offset, or the first
offset at or after a time. The time is compared with the store time of each message (when
the node stored it; msgstore's time index), not the producer's timestamp: for messages
produced as they happen the two are close. The max-timestamp query (-3) is not supported."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.errors import MsgStoreError
from storage_node.kafka.errors import epoch_check, error_code
from storage_node.kafka.node import placements
from storage_node.kafka.registry import Api, ApiTable, RequestContext
from storage_node.store import Store

NO_THROTTLE = datetime.timedelta(0)
LATEST, EARLIEST = -1, -2


def lookup(store: Store, topic: str, partition: int, ts: int) -> tuple[int, int]:
    """(In a thread.) (offset, timestamp) for one query; (-1, -1) when none."""
    first, nxt = store.partition_offsets(topic)[partition]
    if ts == EARLIEST:
        return first, -1
    if ts == LATEST:
        return nxt, -1
    if ts < 0:
        raise UnsupportedQuery(ts)
    offset = store.offset_for_timestamp(topic, partition, ts)
    if offset >= nxt:
        return -1, -1
    page = store.read_columns(topic, partition, offset, 1, 1)
    stamp = int(page.timestamps[0]) if len(page) else ts
    return offset, stamp


class UnsupportedQuery(MsgStoreError):
    def __init__(self, ts: int) -> None:
        super().__init__(f"ListOffsets timestamp {ts} is not supported")


class Unauthorized(Exception):
    pass


async def handle(ctx: RequestContext, request: Any) -> Any:
    service = ctx.node.partitions
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            partition = int(p.partition_index)
            code, offset, stamp, epoch = ErrorCode.none, -1, -1, -1
            try:
                if not ctx.guard.topic(t.name):  # DESCRIBE on the topic (kafka.acl)
                    raise Unauthorized()
                cfg = await service.topic_config(t.name)
                if not 0 <= partition < cfg.partitions:
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    store = service.leader_store(t.name, partition)
                    code = epoch_check(ctx.node, t.name, cfg.partitions, partition, p)
                    if code == ErrorCode.none:
                        offset, stamp = await service.in_thread(
                            lookup, store, t.name, partition, int(p.timestamp)
                        )
                        epoch = placements(ctx.node, t.name, cfg.partitions)[partition].epoch
            except Unauthorized:
                code = ErrorCode.topic_authorization_failed
            except UnsupportedQuery:
                code = ErrorCode.unsupported_version
            except MsgStoreError as exc:
                code = error_code(exc)
            parts.append(
                ctx.make(
                    "ListOffsetsPartitionResponse",
                    partition_index=partition,
                    error_code=code,
                    old_style_offsets=(offset,) if offset >= 0 else (),
                    timestamp=stamp,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(ctx.make("ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
    return ctx.make("ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def register(table: ApiTable) -> None:
    table.add(Api(key=2, name="ListOffsets", min_version=1, max_version=7, handler=handle))
