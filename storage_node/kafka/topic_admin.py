"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): the same cluster-wide topic
changes as the HTTP topic routes (server.routes_topics: the routing file first, then every
node's stores), answered topic by topic.

A topic's placement and replication are the cluster's (partitions are spread over the nodes'
logs, each replicated by the cluster's factor): a replica assignment is refused, and a
replication factor other than -1 (the default) must be 1..the number of nodes. One topic
config is taken: ``retention.ms`` (msgstore keeps retention in hours, and a shared log
expires a segment when the longest retention of its topics has passed); any other is
refused with INVALID_CONFIG naming it (``cleanup.policy=compact`` among them: msgstore does
not compact by key)."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.errors import InvalidArgument, MsgStoreError, UnknownTopic
from storage_node.formats.limits import MAX_PARTITIONS
from storage_node.kafka.errors import error_code, error_message
from storage_node.kafka.registry import Api, ApiTable, RequestContext, make
from storage_node.server.routes_topics import (
    add_partitions_in_cluster,
    create_topic_in_cluster,
    delete_topic_in_cluster,
)
from storage_node.store import TopicConfig
from storage_node.wire.routing_table import check_topic_name

log = logging.getLogger("msgstore.kafka")
NO_THROTTLE = datetime.timedelta(0)


class Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def topic_config(ctx: RequestContext, topic: Any) -> TopicConfig:
    """The store's config for a CreatableTopic, or Refused naming what is wrong."""
    try:
        check_topic_name(topic.name)
    except InvalidArgument as exc:
        raise Refused(ErrorCode.invalid_topic_exception, exc.message) from None
    partitions = int(topic.num_partitions)
    if partitions == -1:
        partitions = 1
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise Refused(ErrorCode.invalid_partitions, f"partitions must be 1..{MAX_PARTITIONS}")
    nodes = len(ctx.node.runtime.routing.current().nodes)
    factor = int(topic.replication_factor)
    if factor != -1 and not 1 <= factor <= nodes:
        raise Refused(
            ErrorCode.invalid_replication_factor,
            f"replication factor {factor}: the cluster has {nodes} nodes; send -1 "
            "(logs are replicated by the cluster's own factor)",
        )
    if topic.assignments:
        raise Refused(
            ErrorCode.invalid_replica_assignment,
            "msgstore places partitions itself: send no replica assignment",
        )
    retention_hours = 168.0
    for config in topic.configs:
        if config.name == "retention.ms" and config.value is not None:
            try:
                ms = int(config.value)
            except ValueError:
                ms = 0
            if ms <= 0:
                raise Refused(ErrorCode.invalid_config, "retention.ms must be a positive integer")
            retention_hours = ms / 3_600_000
        else:
            raise Refused(
                ErrorCode.invalid_config,
                f"topic config {config.name!r} is not supported (only retention.ms)",
            )
    return TopicConfig(topic.name, partitions, "lz4", retention_hours)


async def handle_create(ctx: RequestContext, request: Any) -> Any:
    rt = ctx.node.runtime
    results = []
    names = [t.name for t in request.topics]
    twice = {n for n in names if names.count(n) > 1}
    answered: set[str] = set()
    for topic in request.topics:
        if topic.name in answered:
            continue  # one answer per name, as Kafka gives
        answered.add(topic.name)
        code, message, partitions = ErrorCode.none, None, -1
        cfg = None
        try:
            if not ctx.guard.topic(topic.name):  # CREATE on the topic (kafka.acl)
                raise Refused(ErrorCode.topic_authorization_failed, f"may not create {topic.name}")
            if topic.name in twice:
                raise Refused(ErrorCode.invalid_request, f"topic {topic.name!r} is named twice")
            cfg = topic_config(ctx, topic)
            partitions = cfg.partitions
            ctx.node.partitions.check_writable()
            if not rt.routing.standalone:
                rt.routing.refresh_if_changed()
            exists = topic.name in rt.routing.current().topics
            if exists:
                raise Refused(ErrorCode.topic_already_exists, f"topic {topic.name!r} exists")
            if not request.validate_only:
                await create_topic_in_cluster(rt, cfg)
        except Refused as exc:
            code, message = exc.code, exc.message
        except MsgStoreError as exc:
            code, message = error_code(exc), error_message(exc)
        results.append(
            ctx.make(
                "CreatableTopicResult",
                name=topic.name,
                topic_id=None,
                error_code=code,
                error_message=message,
                num_partitions=partitions if code == ErrorCode.none else -1,
                replication_factor=_factor(ctx) if code == ErrorCode.none else -1,
                configs=_created_configs(ctx, cfg, topic) if code == ErrorCode.none else None,
            )
        )
    return ctx.make("CreateTopicsResponse", throttle_time=NO_THROTTLE, topics=tuple(results))


DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5  # Kafka's config sources


def _created_configs(ctx: RequestContext, cfg: TopicConfig | None, topic: Any) -> Any:
    """The created topic's configs (v5+), as Apache Kafka answers them: its Java admin client
    (kafka-topics) reads this list on success and fails on a null one."""
    cls = getattr(ctx.response_module, "CreatableTopicConfigs", None)
    if cls is None or cfg is None:
        return None
    given = {c.name for c in topic.configs}
    values = {
        "cleanup.policy": "delete",
        "message.timestamp.type": "CreateTime",
        "retention.ms": str(int(cfg.retention_hours * 3_600_000)),
    }
    return tuple(
        make(
            cls,
            name=name,
            value=value,
            read_only=name != "retention.ms",
            config_source=DYNAMIC_TOPIC_CONFIG if name in given else DEFAULT_CONFIG,
            is_sensitive=False,
        )
        for name, value in values.items()
    )


def _factor(ctx: RequestContext) -> int:
    table = ctx.node.runtime.routing.current()
    return table.replication_factor if table.logs else 1


async def handle_delete(ctx: RequestContext, request: Any) -> Any:
    rt = ctx.node.runtime
    results = []
    for name in request.topic_names:
        code = ErrorCode.none
        if not ctx.guard.topic(name):  # DELETE on the topic (kafka.acl)
            results.append(
                ctx.make(
                    "DeletableTopicResult",
                    name=name,
                    error_code=ErrorCode.topic_authorization_failed,
                    error_message=f"may not delete {name}",
                )
            )
            continue
        try:
            ctx.node.partitions.check_writable()
            if not rt.routing.standalone:
                rt.routing.refresh_if_changed()
            if name not in rt.routing.current().topics:
                raise UnknownTopic(f"no topic {name!r}")
            failed = await delete_topic_in_cluster(rt, name)
            if failed:
                log.warning("kafka delete of %s: nodes not told yet: %s", name, failed)
        except MsgStoreError as exc:
            code = error_code(exc)
        results.append(ctx.make("DeletableTopicResult", name=name, error_code=code))
    return ctx.make("DeleteTopicsResponse", throttle_time=NO_THROTTLE, responses=tuple(results))


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    rt = ctx.node.runtime
    results = []
    for topic in request.topics:
        code, message = ErrorCode.none, None
        try:
            if not ctx.guard.topic(topic.name):  # CREATE on the topic (kafka.acl)
                raise Refused(
                    ErrorCode.topic_authorization_failed, f"may not add partitions to {topic.name}"
                )
            ctx.node.partitions.check_writable()
            before = await ctx.node.partitions.topic_config(topic.name)
            count = int(topic.count)
            if topic.assignments:
                raise Refused(
                    ErrorCode.invalid_replica_assignment,
                    "msgstore places partitions itself: send no assignment",
                )
            if not before.partitions < count <= MAX_PARTITIONS:
                raise Refused(
                    ErrorCode.invalid_partitions,
                    f"topic {topic.name!r} has {before.partitions} partitions; ask for more, "
                    f"at most {MAX_PARTITIONS}",
                )
            if not request.validate_only:
                await add_partitions_in_cluster(rt, topic.name, count)
        except Refused as exc:
            code, message = exc.code, exc.message
        except MsgStoreError as exc:
            code, message = error_code(exc), error_message(exc)
        results.append(
            ctx.make(
                "CreatePartitionsTopicResult",
                name=topic.name,
                error_code=code,
                error_message=message,
            )
        )
    return ctx.make("CreatePartitionsResponse", throttle_time=NO_THROTTLE, results=tuple(results))


def register(table: ApiTable) -> None:
    table.add(Api(19, "CreateTopics", 2, 5, handle_create))
    table.add(Api(20, "DeleteTopics", 1, 5, handle_delete))
    table.add(Api(37, "CreatePartitions", 0, 2, handle_create_partitions))
