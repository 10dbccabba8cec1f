"""Topic routes: create, list, describe (with owners and offsets across the cluster), delete,
add partitions.

In a cluster, delete and add-partitions change the routing file first (under its lock,
like create), then this node's store, then every peer's (``scope=local``). A peer that
cannot be reached catches up from the routing file when it next reads it: a deleted topic
names the nodes that still have to delete their copy, and a grown topic's partition count
is applied by ``NodeRuntime.sync_topics_from_routing``."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from storage_node.access.document import ResourceType
from storage_node.errors import MsgStoreError, UnknownTopic
from storage_node.server.api_models import TopicPartitions, TopicSpec, parse
from storage_node.server.app_keys import principal_of, runtime_of
from storage_node.server.params import json_body, scope_param, topic_param
from storage_node.server.peer_fanout import ask_peers, failure_reason
from storage_node.server.runtime import NodeRuntime
from storage_node.store import TopicConfig
from storage_node.wire.message_json import topic_config_to_json

TOPIC = ResourceType.TOPIC


def parse_topic_body(body: Any) -> dict[str, Any]:
    return parse(TopicSpec, body).model_dump()


def topic_with_owners(rt: NodeRuntime, cfg: TopicConfig) -> dict[str, Any]:
    doc = topic_config_to_json(cfg)
    route = rt.routing.current().topics.get(cfg.name)
    doc["owners"] = list(route.owners) if route else [rt.settings.node_id] * cfg.partitions
    return doc


async def get_topic_config(rt: NodeRuntime, topic: str) -> TopicConfig:
    """The topic's config; a topic only in the routing table is created locally first."""
    return await rt.partitions.topic_config(topic)


async def create_topic(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    rt.partitions.check_writable()
    spec = parse_topic_body(await json_body(request))
    cfg = TopicConfig(**spec)
    created, down = await create_topic_in_cluster(rt, cfg)
    doc = topic_with_owners(rt, cfg)
    if down:
        doc["skipped_nodes"] = down
    return web.json_response(doc, status=201 if created else 200)


async def create_topic_in_cluster(rt: NodeRuntime, cfg: TopicConfig) -> tuple[bool, dict[str, str]]:
    """Create a topic: in the routing file first (its partitions to the ready nodes), then
    here (every front end's topic creation). (created anywhere, the peers skipped and why)."""
    created_route = False
    down: dict[str, str] = {}
    if not rt.routing.standalone:
        before = rt.routing.table.topics.get(cfg.name)
        if before is None:
            down = await _unready_peers(rt)
        await rt.in_thread(rt.routing.add_topic, cfg, frozenset(down))
        created_route = before is None
    created = await rt.partitions.create_topic(cfg)
    return created or created_route, down


async def _unready_peers(rt: NodeRuntime) -> dict[str, str]:
    """Peers that are not ready now, with the reason: a new topic's partitions go to the
    others, so no partition starts out unreachable."""
    answers = await ask_peers(rt, "GET", "/readyz", {})
    return {pid: failure_reason(a) for pid, a in answers if isinstance(a, BaseException)}


async def list_topics(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    topics = await all_topics(rt)
    shown = rt.authorizer.describable(principal_of(request), TOPIC, [t.name for t in topics])
    topics = [t for t in topics if t.name in shown]  # only the topics it may describe
    return web.json_response({"topics": [topic_with_owners(rt, t) for t in topics]})


async def all_topics(rt: NodeRuntime) -> list[TopicConfig]:
    """Every topic, by name, after taking the routing table's changes."""
    rt.partitions.catalog()  # 503 while opening
    rt.routing.refresh_if_changed()
    await rt.in_thread(rt.sync_topics_from_routing)
    return sorted(rt.partitions.list_topics(), key=lambda t: t.name)


async def describe_topic(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    return web.json_response(
        await topic_description(rt, topic_param(request), scope_param(request))
    )


async def topic_description(rt: NodeRuntime, topic: str, scope: str) -> dict[str, Any]:
    """A topic's config, owners and each partition's (first, next) offset and stored bytes,
    asked of the node serving it (``scope`` cluster), with the nodes that did not answer."""
    cfg = await get_topic_config(rt, topic)
    local = await rt.in_thread(rt.partitions.partition_stats, topic, cfg.partitions)
    doc = topic_with_owners(rt, cfg)
    table = rt.routing.current()
    infos: list[dict[str, Any]] = []
    serving: dict[int, str] = {}  # the node that answers for each partition
    for p, (first, nxt, stored) in enumerate(local):
        owner = doc["owners"][p]
        serving[p] = table.leader_of(owner)  # a replicated log's leader since its failover
        infos.append(
            {
                "partition": p,
                "owner": owner,
                "owner_address": table.node_address(serving[p]),
                "first_offset": first,
                "next_offset": nxt,
                "stored_bytes": stored,
            }
        )
    unreachable: list[str] = []
    if scope == "cluster":
        remote_owners = set(serving.values()) - {rt.settings.node_id}
        addresses = {o: table.node_address(o) for o in remote_owners}

        async def fetch(owner: str) -> tuple[str, Any]:
            address = addresses[owner]
            if address is None:
                raise MsgStoreError(f"node {owner} has no address")
            return owner, await rt.peer_get(address, f"/v1/topics/{topic}", {"scope": "local"})

        results = await asyncio.gather(*(fetch(o) for o in remote_owners), return_exceptions=True)
        remote: dict[str, Any] = {}
        for owner, result in zip(remote_owners, results, strict=True):
            if isinstance(result, BaseException) or result[1] is None:
                unreachable.append(owner)
            else:
                remote[owner] = result[1]
        for info in infos:
            owner = serving[info["partition"]]
            if owner == rt.settings.node_id:
                continue
            peer_doc = remote.get(owner)
            if peer_doc is None:
                info["first_offset"] = info["next_offset"] = info["stored_bytes"] = None
                continue
            peer_info = peer_doc["partition_offsets"][info["partition"]]
            info["first_offset"] = peer_info["first_offset"]
            info["next_offset"] = peer_info["next_offset"]
            info["stored_bytes"] = peer_info.get("stored_bytes")  # (a node of an older release)
    doc["partition_offsets"] = infos
    doc["unreachable_nodes"] = sorted(unreachable)
    return doc


async def _each_peer(
    rt: NodeRuntime, method: str, path: str, body: Any = None
) -> tuple[frozenset[str], dict[str, str]]:
    """Send the ``scope=local`` form of a topic change to every peer: the ids that did it
    (a 404, nothing to do there, counts as done) and, per peer that did not, why."""
    done: set[str] = set()
    failed: dict[str, str] = {}
    for peer_id, answer in await ask_peers(rt, method, path, {"scope": "local"}, body):
        if isinstance(answer, BaseException):
            failed[peer_id] = failure_reason(answer)
        else:
            done.add(peer_id)
    return frozenset(done), failed


async def delete_topic(request: web.Request) -> web.Response:
    """Delete a topic everywhere (``scope=local``: in this node's store only)."""
    rt = runtime_of(request)
    topic = topic_param(request)
    scope = scope_param(request)
    rt.partitions.check_writable()
    rt.routing.refresh_if_changed()  # a peer asked: the file no longer routes the topic
    if rt.routing.standalone or scope == "local":
        await rt.partitions.delete_topic(topic)
        return web.json_response({"name": topic, "deleted": True, "pending_nodes": {}})
    failed = await delete_topic_in_cluster(rt, topic)
    return web.json_response({"name": topic, "deleted": True, "pending_nodes": failed})


async def delete_topic_in_cluster(rt: NodeRuntime, topic: str) -> dict[str, str]:
    """Delete a topic from the routing file, here and on every peer; the peers that could
    not be told, and why (they delete it when they next read the file)."""
    if rt.routing.standalone:
        await rt.partitions.delete_topic(topic)
        return {}
    await rt.in_thread(rt.routing.remove_topic, topic)
    try:
        await rt.partitions.delete_topic(topic)
    except UnknownTopic:
        pass  # routed but never created here
    done, failed = await _each_peer(rt, "DELETE", f"/v1/topics/{topic}")
    await rt.in_thread(rt.routing.deletion_done, topic, done | {rt.settings.node_id})
    return failed


async def add_partitions(request: web.Request) -> web.Response:
    """Raise a topic's partition count to ``partitions`` (only up; the same count is a
    no-op); ``scope=local``: in this node's store only."""
    rt = runtime_of(request)
    topic = topic_param(request)
    scope = scope_param(request)
    partitions = parse(TopicPartitions, await json_body(request)).partitions
    rt.partitions.check_writable()
    rt.routing.refresh_if_changed()
    if scope == "local":
        before = await get_topic_config(rt, topic)
        cfg = await rt.partitions.add_partitions(topic, partitions)
        failed: dict[str, str] = {}
        down: dict[str, str] = {}
    else:
        before, cfg, failed, down = await add_partitions_in_cluster(rt, topic, partitions)
    doc = topic_with_owners(rt, cfg)
    doc["previous_partitions"] = before.partitions
    doc["pending_nodes"] = failed
    if down:
        doc["skipped_nodes"] = down
    return web.json_response(doc)


async def add_partitions_in_cluster(
    rt: NodeRuntime, topic: str, partitions: int
) -> tuple[TopicConfig, TopicConfig, dict[str, str], dict[str, str]]:
    """Grow a topic in the routing file (new partitions to ready nodes), here and on every
    peer: (config before, config after, peers not told, peers skipped)."""
    before = await get_topic_config(rt, topic)
    failed: dict[str, str] = {}
    down: dict[str, str] = {}
    if not rt.routing.standalone:
        if partitions > before.partitions:
            down = await _unready_peers(rt)
        await rt.in_thread(rt.routing.grow_topic, topic, partitions, frozenset(down))
        cfg = await rt.partitions.add_partitions(topic, partitions)
        if partitions > before.partitions:
            body = {"partitions": partitions}
            path = f"/v1/topics/{topic}/partitions"
            _done, failed = await _each_peer(rt, "POST", path, body)
    else:
        cfg = await rt.partitions.add_partitions(topic, partitions)
    return before, cfg, failed, down


def register(app: web.Application) -> None:
    app.router.add_post("/v1/topics", create_topic)
    app.router.add_get("/v1/topics", list_topics)
    app.router.add_get("/v1/topics/{topic}", describe_topic)
    app.router.add_delete("/v1/topics/{topic}", delete_topic)
    app.router.add_post("/v1/topics/{topic}/partitions", add_partitions)
