"""``/`` (the cluster: every node's health, address, disk use, logs led and followed,
under-replicated logs, throughput charts) and ``/replication`` (every replicated log: its
leader, epochs, and each follower's lag), asked of the nodes with the user's token."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from storage_node.client import AsyncClient
from storage_node.console.charts import chart, human
from storage_node.console.history import History
from storage_node.console.pages import client_of, page, render
from storage_node.console.runtime import each_node, runtime_of
from storage_node.errors import MsgStoreError


def _health(answer: Any) -> str:
    """A node's ``/readyz`` answer as a word: ready, unreachable (no connection), or not
    ready and why."""
    if not isinstance(answer, MsgStoreError):
        return "ready" if isinstance(answer, dict) and answer.get("ready") else "not ready"
    if answer.status == 503 and "reach" in answer.message:
        return "unreachable"
    return f"not ready: {answer.message}"


async def _statuses(client: AsyncClient) -> dict[str, Any]:
    """Every node's replication status ({node: document or error})."""
    return await each_node(client, "/v1/replication/status")


def _node_charts(history: History, node: str) -> list[Any]:
    return [
        chart(f"{node}: messages in per second", history.rate(f"node/{node}/in_messages")),
        chart(f"{node}: bytes in per second", history.rate(f"node/{node}/in_bytes"), "B"),
        chart(
            f"{node}: messages out per second (committed by groups)",
            history.rate(f"node/{node}/out_messages"),
        ),
    ]


@page
async def cluster_page(request: web.Request) -> web.StreamResponse:
    client = client_of(request)
    history = runtime_of(request).history
    doc = await client.refresh_routing()
    health = await each_node(client, "/readyz")
    statuses = await _statuses(client)
    under: set[str] = set()
    for answer in statuses.values():
        if isinstance(answer, dict):
            under.update(answer.get("under_replicated", []))
    logs = doc.get("logs", {})
    nodes = []
    for n in doc.get("nodes", []):
        node = n["id"]
        used, size = history.last(f"node/{node}/disk_used"), history.last(f"node/{node}/disk_size")
        health_word = _health(health.get(node))
        nodes.append(
            {
                "id": node,
                "address": n["address"],
                "health": health_word,
                "ok": health_word == "ready",
                "led": sorted(i for i, lg in logs.items() if lg["leader"] == node and lg["epoch"]),
                "followed": sorted(
                    i for i, lg in logs.items() if node in lg["replicas"] and lg["leader"] != node
                ),
                "disk": "-"
                if used is None or not size
                else f"{human(used, 'B')} of {human(size, 'B')} ({used / size:.0%})",
                "charts": _node_charts(history, node),
            }
        )
    context = {
        "nodes": nodes,
        "logs": [
            {
                "id": i,
                "leader": lg["leader"] if lg["epoch"] else "-",
                "epoch": lg["epoch"],
                "replicas": lg["replicas"],
                "under": i in under,
            }
            for i, lg in sorted(logs.items())
        ],
        "under": sorted(under),
        "factor": doc.get("replication", {}).get("factor", 1),
        "generation": doc.get("generation"),
    }
    return render(request, "cluster.html", context)


@page
async def replication_page(request: web.Request) -> web.StreamResponse:
    """Each log as its leader reports it (epochs, followers' lag) and as each follower
    does (its own lag behind the leader)."""
    client = client_of(request)
    doc = await client.refresh_routing()
    statuses = await _statuses(client)
    unreachable = sorted(n for n, a in statuses.items() if isinstance(a, MsgStoreError))
    rows = []
    for log_id, lg in sorted(doc.get("logs", {}).items()):
        leader = statuses.get(lg["leader"])
        mine = leader.get("logs", {}).get(log_id, {}) if isinstance(leader, dict) else {}
        followers = []
        for node in lg["replicas"]:
            if node == lg["leader"]:
                continue
            seen = mine.get("followers", {}).get(node, {})
            answer = statuses.get(node)
            own = answer.get("logs", {}).get(log_id, {}) if isinstance(answer, dict) else {}
            followers.append(
                {
                    "node": node,
                    "acked": seen.get("acked", "?"),
                    "lag_bytes": seen.get("lag_bytes", own.get("lag_bytes", "?")),
                    "in_sync": seen.get("in_sync"),
                    "last_fetch": seen.get("last_fetch_s_ago"),
                    "error": own.get("last_error"),
                }
            )
        rows.append(
            {
                "id": log_id,
                "leader": lg["leader"] if lg["epoch"] else "-",
                "epoch": lg["epoch"],
                "epochs": mine.get("epochs", []),
                "log_end": mine.get("log_end", "?"),
                "in_sync": mine.get("in_sync", "?"),
                "followers": followers,
            }
        )
    context = {
        "logs": rows,
        "unreachable": unreachable,
        "factor": doc.get("replication", {}).get("factor", 1),
    }
    return render(request, "replication.html", context)
