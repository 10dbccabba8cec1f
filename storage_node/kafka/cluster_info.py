"""DescribeCluster (60), DescribeConfigs (32) and OffsetForLeaderEpoch (23): what a client
or an admin tool asks about the cluster, its topics and its leader epochs.

DescribeConfigs answers a topic's settings as Kafka names them (read-only: changing them
with AlterConfigs is not supported) and a broker's few that clients read. OffsetForLeaderEpoch
answers the end offset of the log's current epoch (the partition's next offset); for an
older epoch it answers -1 (UNDEFINED_EPOCH_OFFSET): msgstore does not keep the offset at
which each epoch began, so a client cannot detect a truncation through it (KIP-320)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.errors import MsgStoreError
from storage_node.kafka.errors import epoch_check, error_code, error_message
from storage_node.kafka.node import placements
from storage_node.kafka.registry import Api, ApiTable, RequestContext

NO_THROTTLE = datetime.timedelta(0)
TOPIC, BROKER = 2, 4
UNKNOWN_OPERATIONS = -2147483648


async def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    node = ctx.node
    brokers = tuple(
        ctx.make("DescribeClusterBroker", broker_id=b.broker_id, host=b.host, port=b.port)
        for b in node.brokers(ctx.listener)
    )
    return ctx.make(
        "DescribeClusterResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        cluster_id=node.cluster_id(),
        controller_id=node.broker_id,
        brokers=brokers,
        cluster_authorized_operations=UNKNOWN_OPERATIONS,
    )


async def _topic_configs(ctx: RequestContext, name: str) -> dict[str, str]:
    cfg = await ctx.node.partitions.topic_config(name)
    store = ctx.node.partitions.catalog()
    table = ctx.node.runtime.routing.current()
    return {
        "retention.ms": str(int(cfg.retention_hours * 3_600_000)),
        "cleanup.policy": "delete",
        "message.timestamp.type": "CreateTime",
        "max.message.bytes": str(store.config.max_message_bytes),
        "min.insync.replicas": str(table.min_in_sync if table.logs else 1),
        "msgstore.partitions": str(cfg.partitions),
        "msgstore.segment.compression": cfg.compression,
    }


def _broker_configs(ctx: RequestContext) -> dict[str, str]:
    return {
        "broker.id": str(ctx.node.broker_id),
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "message.max.bytes": str(ctx.node.partitions.catalog().config.max_message_bytes),
    }


async def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    results = []
    for resource in request.resources:
        code, message, configs = ErrorCode.none, None, {}
        try:
            if resource.resource_type == TOPIC and not ctx.guard.topic(resource.resource_name):
                code = ErrorCode.topic_authorization_failed  # DESCRIBE on it (kafka.acl)
                message = f"may not describe topic {resource.resource_name}"
            elif resource.resource_type == TOPIC:
                configs = await _topic_configs(ctx, resource.resource_name)
            elif resource.resource_type == BROKER:
                configs = _broker_configs(ctx)
            else:
                code = ErrorCode.invalid_request
                message = f"resource type {resource.resource_type} is not described"
        except MsgStoreError as exc:
            code, message = error_code(exc), error_message(exc)
        wanted = resource.configuration_keys
        entries = tuple(
            ctx.make(
                "DescribeConfigsResourceResult",
                name=k,
                value=v,
                read_only=True,
                is_default=False,
                config_source=5 if resource.resource_type == BROKER else 1,
                is_sensitive=False,
                synonyms=(),
                config_type=0,
                documentation=None,
            )
            for k, v in sorted(configs.items())
            if wanted is None or k in wanted
        )
        results.append(
            ctx.make(
                "DescribeConfigsResult",
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=entries,
            )
        )
    return ctx.make("DescribeConfigsResponse", throttle_time=NO_THROTTLE, results=tuple(results))


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    service = ctx.node.partitions
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            code, epoch, end = ErrorCode.none, -1, -1
            try:
                if not ctx.guard.topic(t.topic):  # DESCRIBE on the topic (kafka.acl)
                    raise _Unauthorized()
                cfg = await service.topic_config(t.topic)
                if not 0 <= p.partition < cfg.partitions:
                    raise _Unknown()
                store = service.leader_store(t.topic, p.partition)
                code = epoch_check(ctx.node, t.topic, cfg.partitions, p.partition, p)
                current = placements(ctx.node, t.topic, cfg.partitions)[p.partition].epoch
                if code == ErrorCode.none and p.leader_epoch == current:
                    offsets = await service.in_thread(store.partition_offsets, t.topic)
                    epoch, end = current, offsets[p.partition][1]
            except _Unknown:
                code = ErrorCode.unknown_topic_or_partition
            except _Unauthorized:
                code = ErrorCode.topic_authorization_failed
            except MsgStoreError as exc:
                code = error_code(exc)
            parts.append(
                ctx.make(
                    "EpochEndOffset",
                    error_code=code,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(
            ctx.make("OffsetForLeaderTopicResult", topic=t.topic, partitions=tuple(parts))
        )
    return ctx.make("OffsetForLeaderEpochResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


class _Unknown(Exception):
    pass


class _Unauthorized(Exception):
    pass


def register(table: ApiTable) -> None:
    table.add(Api(60, "DescribeCluster", 0, 1, handle_describe_cluster))
    table.add(Api(32, "DescribeConfigs", 1, 4, handle_describe_configs))
    table.add(Api(23, "OffsetForLeaderEpoch", 2, 4, handle_offset_for_leader_epoch))
