"""Topic routes: create, list, describe (with owners and offsets across the cluster)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from storage_node.errors import MsgStoreError, UnknownTopic
from storage_node.server.api_models import TopicSpec, parse
from storage_node.server.app_keys import runtime_of
from storage_node.server.message_json import topic_config_to_json
from storage_node.server.params import json_body, scope_param, topic_param
from storage_node.server.runtime import NodeRuntime


def parse_topic_body(body: Any) -> dict[str, Any]:
    return parse(TopicSpec, body).model_dump()


def topic_with_owners(rt: NodeRuntime, cfg: Any) -> dict[str, Any]:
    doc = topic_config_to_json(cfg)
    route = rt.routing.current().topics.get(cfg.name)
    doc["owners"] = list(route.owners) if route else [rt.settings.node_id] * cfg.partitions
    return doc


async def get_topic_config(rt: NodeRuntime, topic: str) -> Any:
    """The topic's config; a topic only in the routing table is created locally first."""
    store = rt.require_store()
    try:
        return store.get_topic(topic)
    except UnknownTopic:
        if rt.routing.route(topic) is None:
            raise
        await rt.in_thread(rt.sync_topics_from_routing)
        return store.get_topic(topic)


async def create_topic(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    store = rt.require_writable()
    spec = parse_topic_body(await json_body(request))
    from storage_node.store import TopicConfig

    cfg = TopicConfig(**spec)
    created_route = False
    down: dict[str, str] = {}
    if not rt.routing.standalone:
        before = rt.routing.table.topics.get(spec["name"])
        if before is None:
            down = await _unready_peers(rt)
        await rt.in_thread(
            rt.routing.add_topic,
            spec["name"],
            spec["partitions"],
            spec["compression"],
            spec["retention_hours"],
            frozenset(down),
        )
        created_route = before is None
    created = await rt.in_thread(store.create_topic, cfg)
    status = 201 if (created or created_route) else 200
    doc = topic_with_owners(rt, cfg)
    if down:
        doc["skipped_nodes"] = down
    return web.json_response(doc, status=status)


async def _unready_peers(rt: NodeRuntime) -> dict[str, str]:
    """Peers that are not ready now, with the reason: a new topic's partitions go to the
    others, so no partition starts out unreachable."""
    peers = rt.routing.peers()
    answers = await asyncio.gather(
        *(rt.peer_get(address, "/readyz", {}) for _, address in peers), return_exceptions=True
    )
    down = {}
    for (peer_id, _), answer in zip(peers, answers, strict=True):
        if isinstance(answer, MsgStoreError):
            down[peer_id] = answer.message
        elif isinstance(answer, BaseException):
            down[peer_id] = f"{type(answer).__name__}: {answer}"
    return down


async def list_topics(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    store = rt.require_store()
    rt.routing.refresh_if_changed()
    await rt.in_thread(rt.sync_topics_from_routing)
    topics = sorted(store.list_topics(), key=lambda t: t.name)
    return web.json_response({"topics": [topic_with_owners(rt, t) for t in topics]})


async def describe_topic(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    topic = topic_param(request)
    scope = scope_param(request)
    cfg = await get_topic_config(rt, topic)
    store = rt.require_store()
    local = await rt.in_thread(store.partition_offsets, topic)
    doc = topic_with_owners(rt, cfg)
    table = rt.routing.current()
    infos: list[dict[str, Any]] = []
    for p, (first, nxt) in enumerate(local):
        owner = doc["owners"][p]
        infos.append(
            {
                "partition": p,
                "owner": owner,
                "owner_address": table.node_address(owner),
                "first_offset": first,
                "next_offset": nxt,
            }
        )
    unreachable: list[str] = []
    if scope == "cluster":
        remote_owners = {i["owner"] for i in infos} - {rt.settings.node_id}
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
            owner = info["owner"]
            if owner == rt.settings.node_id:
                continue
            peer_doc = remote.get(owner)
            if peer_doc is None:
                info["first_offset"] = info["next_offset"] = None
                continue
            peer_info = peer_doc["partition_offsets"][info["partition"]]
            info["first_offset"] = peer_info["first_offset"]
            info["next_offset"] = peer_info["next_offset"]
    doc["partition_offsets"] = infos
    doc["unreachable_nodes"] = sorted(unreachable)
    return web.json_response(doc)


def register(app: web.Application) -> None:
    app.router.add_post("/v1/topics", create_topic)
    app.router.add_get("/v1/topics", list_topics)
    app.router.add_get("/v1/topics/{topic}", describe_topic)
