"""Metadata (key 3): every broker with its advertised Kafka address, and for each topic its
partitions' leaders (the nodes leading their logs), leader epochs (the logs' epochs) and
stable topic ids. Topics are not created by Metadata (no auto-creation). Only topics the
connection's principal may describe are listed; one it names but may not describe is
answered TOPIC_AUTHORIZATION_FAILED, whether it exists or not."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.kafka.node import placements, topic_id
from storage_node.kafka.registry import Api, ApiTable, RequestContext

NO_THROTTLE = datetime.timedelta(0)


def topic_partitions(ctx: RequestContext) -> dict[str, int]:
    """Topic name -> partition count, as this node knows the cluster's topics."""
    table = ctx.node.runtime.routing.current()
    return {name: route.partitions for name, route in table.topics.items()}


async def handle(ctx: RequestContext, request: Any) -> Any:
    node = ctx.node
    rt = node.runtime
    if not rt.routing.standalone:
        rt.routing.refresh_if_changed()
    known = topic_partitions(ctx)
    wanted = request.topics
    listing = wanted is None or (ctx.api_version == 0 and not wanted)
    if listing:  # every topic the principal may describe, the others left out (kafka.acl)
        names = ctx.guard.visible_topics(sorted(known))
    else:
        names = [t.name for t in wanted if t.name is not None]
    topics = []
    for name in names:
        count = known.get(name)
        refused = not listing and not ctx.guard.topic(name)  # never says whether it exists
        if count is None or refused:
            topics.append(
                ctx.make(
                    "MetadataResponseTopic",
                    error_code=ErrorCode.topic_authorization_failed
                    if refused
                    else ErrorCode.unknown_topic_or_partition,
                    name=name,
                    topic_id=None,
                    is_internal=False,
                    partitions=(),
                    topic_authorized_operations=-2147483648,
                )
            )
            continue
        parts = tuple(
            ctx.make(
                "MetadataResponsePartition",
                error_code=ErrorCode.none,
                partition_index=p,
                leader_id=place.leader,
                leader_epoch=place.epoch,
                replica_nodes=place.replicas,
                isr_nodes=(place.leader,),
                offline_replicas=(),
            )
            for p, place in enumerate(placements(node, name, count))
        )
        topics.append(
            ctx.make(
                "MetadataResponseTopic",
                error_code=ErrorCode.none,
                name=name,
                topic_id=topic_id(name),
                is_internal=False,
                partitions=parts,
                topic_authorized_operations=-2147483648,
            )
        )
    brokers = tuple(
        ctx.make("MetadataResponseBroker", node_id=b.broker_id, host=b.host, port=b.port, rack=None)
        for b in node.brokers(ctx.listener)
    )
    return ctx.make(
        "MetadataResponse",
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=node.cluster_id(),
        controller_id=node.broker_id,
        topics=tuple(topics),
        cluster_authorized_operations=-2147483648,
    )


def register(table: ApiTable) -> None:
    table.add(Api(key=3, name="Metadata", min_version=0, max_version=12, handler=handle))
