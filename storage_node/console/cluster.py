"""``/`` (the cluster: nodes, health, replicated logs), ``/topics``, ``/topics/{topic}``,
``/groups`` and ``/groups/{group}`` (lag per partition, sortable, "lagging only")."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from storage_node.console.pages import PageError, page, render
from storage_node.errors import NotFound
from storage_node.server.app_keys import runtime_of
from storage_node.server.params import group_param, topic_param
from storage_node.server.peer_fanout import ask_peers, failure_reason
from storage_node.server.routes_groups import all_groups, group_offsets
from storage_node.server.routes_topics import all_topics, topic_description, topic_with_owners

SORTS = ("topic", "partition", "committed", "next_offset", "lag")


@page
async def cluster_page(request: web.Request) -> web.StreamResponse:
    rt = runtime_of(request)
    table = rt.routing.current()
    health = {
        pid: ("ready" if isinstance(a, dict) else failure_reason(a) if a else "no answer")
        for pid, a in await ask_peers(rt, "GET", "/readyz", {})
    }
    ready = rt.store is not None and not rt.draining
    health[rt.settings.node_id] = "ready" if ready else (rt.startup_error or "not ready")
    statuses = [(rt.settings.node_id, rt.replicas.status() if rt.replicas else None)]
    statuses += await ask_peers(rt, "GET", "/v1/replication/status", {})
    under: set[str] = set()
    for _pid, doc in statuses:
        if isinstance(doc, dict):
            under.update(doc.get("under_replicated", []))
    nodes = []
    for n in table.nodes:
        led = [lg.id for lg in table.logs.values() if lg.leader == n.id and lg.epoch > 0]
        followed = [
            lg.id for lg in table.logs.values() if n.id in lg.replicas and lg.leader != n.id
        ]
        nodes.append(
            {
                "id": n.id,
                "address": n.address,
                "health": health.get(n.id, "unknown"),
                "ok": health.get(n.id) == "ready",
                "led": led,
                "followed": followed,
                "here": n.id == rt.settings.node_id,
            }
        )
    logs = [
        {
            "id": lg.id,
            "leader": lg.leader if lg.epoch > 0 else "-",
            "epoch": lg.epoch,
            "replicas": lg.replicas,
            "under": lg.id in under,
        }
        for lg in sorted(table.logs.values(), key=lambda x: x.id)
    ]
    context = {
        "nodes": nodes,
        "logs": logs,
        "under": sorted(under),
        "factor": table.replication_factor,
        "generation": table.generation,
    }
    return render(request, "cluster.html", context)


@page
async def topics_page(request: web.Request) -> web.StreamResponse:
    rt = runtime_of(request)
    topics = [topic_with_owners(rt, t) for t in await all_topics(rt)]
    return render(request, "topics.html", {"topics": topics})


@page
async def topic_page(request: web.Request) -> web.StreamResponse:
    rt = runtime_of(request)
    doc = await topic_description(rt, topic_param(request), "cluster")
    for info in doc["partition_offsets"]:
        first, nxt = info["first_offset"], info["next_offset"]
        info["count"] = None if first is None or nxt is None else nxt - first
        info["browse"] = "/search?" + urlencode(
            {"topic": doc["name"], "partition": info["partition"], "offset": first or 0}
        )
    return render(request, "topic.html", {"t": doc})


@page
async def groups_page(request: web.Request) -> web.StreamResponse:
    groups, unreachable = await all_groups(runtime_of(request), "cluster")
    return render(request, "groups.html", {"groups": groups, "unreachable": unreachable})


@page
async def group_page(request: web.Request) -> web.StreamResponse:
    """Lag per partition as ``msgstore group describe`` computes it: the partition's next
    offset less the committed offset (or its first offset, when that is later)."""
    rt = runtime_of(request)
    group = group_param(request)
    sort = request.query.get("sort", "lag")
    order = request.query.get("order", "desc" if sort == "lag" else "asc")
    lagging = request.query.get("lagging", "") in ("1", "on", "true")
    if sort not in SORTS or order not in ("asc", "desc"):
        raise PageError(400, f"sort must be one of {', '.join(SORTS)} and order asc or desc")
    offsets, unreachable = await group_offsets(rt, group, None, "cluster")
    if not offsets and not unreachable:
        raise NotFound(f"consumer group {group!r} has no committed offsets")
    rows: list[dict[str, Any]] = []
    for topic in sorted(offsets):
        doc = await topic_description(rt, topic, "cluster")
        unreachable += [n for n in doc["unreachable_nodes"] if n not in unreachable]
        for info in doc["partition_offsets"]:
            committed = offsets[topic].get(str(info["partition"]))
            first, nxt = info["first_offset"], info["next_offset"]
            lag = None
            if nxt is not None:
                lag = nxt - max(committed if committed is not None else 0, first or 0)
            rows.append(
                {
                    "topic": topic,
                    "partition": info["partition"],
                    "owner": info["owner"],
                    "committed": committed,
                    "first_offset": first,
                    "next_offset": nxt,
                    "lag": lag,
                }
            )
    total = sum(r["lag"] or 0 for r in rows)
    shown = [r for r in rows if not lagging or (r["lag"] or 0) > 0]
    missing = 2**63 if order == "asc" else -(2**63)  # unknown values sort last

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        value = r[sort]
        return (value if value is not None else missing, r["topic"], r["partition"])

    shown.sort(key=key, reverse=order == "desc")
    links = {
        s: "?"
        + urlencode(
            {
                "sort": s,
                "order": "asc" if s == sort and order == "desc" else "desc",
                **({"lagging": "1"} if lagging else {}),
            }
        )
        for s in SORTS
    }
    context = {
        "group": group,
        "rows": shown,
        "total": total,
        "count": len(rows),
        "sort": sort,
        "order": order,
        "lagging": lagging,
        "links": links,
        "unreachable": unreachable,
    }
    return render(request, "group.html", context)
