"""Consumer-group routes: commit a partition's offset, read a group's committed offsets."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from storage_node.access.document import ResourceType
from storage_node.errors import InvalidArgument
from storage_node.replication.shipping import H_COPIES
from storage_node.server.api_models import OffsetCommit, parse
from storage_node.server.app_keys import principal_of, runtime_of
from storage_node.server.params import group_param, json_body, scope_param
from storage_node.server.peer_fanout import peer_documents
from storage_node.server.routes_topics import get_topic_config
from storage_node.server.runtime import NodeRuntime
from storage_node.wire.routing_table import check_topic_name


async def commit_offset(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    group = group_param(request)
    body = parse(OffsetCommit, await json_body(request))
    topic, partition, offset = body.topic, body.partition, body.offset
    cfg = await get_topic_config(rt, topic)
    if partition >= cfg.partitions:
        raise InvalidArgument(f"partition {partition} does not exist in topic {topic!r}")
    # a replicated log writes the commit into the log, so its copies hold it (failover)
    copies = await rt.partitions.commit_offset(group, topic, partition, offset)
    return web.json_response(
        {"group": group, "topic": topic, "partition": partition, "offset": offset},
        headers={H_COPIES: str(copies)} if copies is not None else None,
    )


async def committed_offsets(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    group = group_param(request)
    scope = scope_param(request)
    topic = request.query.get("topic") or None
    offsets, unreachable = await group_offsets(rt, group, topic, scope)
    readable = rt.authorizer.readable(principal_of(request), offsets)
    offsets = {t: parts for t, parts in offsets.items() if t in readable}
    return web.json_response({"group": group, "offsets": offsets, "unreachable_nodes": unreachable})


async def group_offsets(
    rt: NodeRuntime, group: str, topic: str | None, scope: str
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """A group's committed offsets (topic -> partition as text -> offset) from every log
    led here and (``scope`` cluster) every peer; the peers that did not answer."""
    if topic is not None:
        check_topic_name(topic)
        await get_topic_config(rt, topic)
    local = await rt.partitions.committed_offsets(group, topic)  # every log led here
    offsets = {t: {str(p): o for p, o in parts.items()} for t, parts in local.items()}
    unreachable: list[str] = []
    if scope == "cluster":
        params = {"scope": "local"}
        if topic:
            params["topic"] = topic
        path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
        answers, unreachable = await peer_documents(rt, path, params)
        for answer in answers:
            for t, parts in answer["offsets"].items():
                offsets.setdefault(t, {}).update(parts)
    return offsets, unreachable


async def list_groups(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    groups, unreachable = await all_groups(rt, scope_param(request))
    shown = rt.authorizer.describable(principal_of(request), ResourceType.GROUP, groups)
    groups = [g for g in groups if g in shown]  # only the groups it may describe
    return web.json_response({"groups": groups, "unreachable_nodes": unreachable})


async def all_groups(rt: NodeRuntime, scope: str) -> tuple[list[str], list[str]]:
    """Every consumer group with an offset in a log led here or (``scope`` cluster) on a
    peer, by name; the peers that did not answer."""
    groups = await rt.partitions.consumer_groups()
    unreachable: list[str] = []
    if scope == "cluster":
        answers, unreachable = await peer_documents(rt, "/v1/consumer-groups", {"scope": "local"})
        for answer in answers:
            groups.update(answer["groups"])
    return sorted(groups), unreachable


def register(app: web.Application) -> None:
    app.router.add_get("/v1/consumer-groups", list_groups)
    app.router.add_post("/v1/consumer-groups/{group}/offsets", commit_offset)
    app.router.add_get("/v1/consumer-groups/{group}/offsets", committed_offsets)
