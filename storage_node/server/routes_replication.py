"""Replication routes (docs/REPLICATION.md): the log-shipping fetch, a log's epoch end, the
controller's fence, and the node's replication status.

Every request names a leader epoch; an older one than this node knows is refused (409
``fenced``), and a newer one tells a leader it was replaced, so it writes nothing more.
"""

from __future__ import annotations

from aiohttp import web

from storage_node.errors import InvalidArgument, NotFound
from storage_node.formats.names import NAME_RE
from storage_node.replication import leader, shipping
from storage_node.replication.replicas import LogHost
from storage_node.server.app_keys import runtime_of
from storage_node.server.params import json_body, query_int
from storage_node.wire.routing_table import parse_routing

MAX_WAIT_MS = 10_000


def _host(request: web.Request) -> LogHost:
    host = runtime_of(request).replicas
    if host is None:
        raise NotFound("this node does not replicate logs (no 'logs' in its routing table)")
    return host


def _log_id(request: web.Request) -> str:
    log_id = request.match_info["log"]
    if not NAME_RE.match(log_id):
        raise InvalidArgument(f"invalid log id {log_id!r}")
    return log_id


async def fetch(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    host = _host(request)
    log_id = _log_id(request)
    position = query_int(request, "position", None, 0, 2**63 - 1)
    epoch = query_int(request, "epoch", None, 0, 2**62)
    wait_ms = query_int(request, "wait_ms", 0, 0, MAX_WAIT_MS) or 0
    topics = query_int(request, "topics", 0, 0, 2**31) or 0
    follower = request.query.get("follower", "")
    if position is None or epoch is None or not follower:
        raise InvalidArgument("a fetch needs position, epoch and follower")
    sent = await leader.ship(host, log_id, follower, position, epoch, wait_ms, topics, rt.in_thread)
    return web.Response(body=sent.data, headers=sent.headers, content_type=shipping.CONTENT_TYPE)


async def epoch_end(request: web.Request) -> web.Response:
    """Where this leader's log says epoch ``of`` ended (KIP-101's OffsetsForLeaderEpoch)."""
    host = _host(request)
    log_id = _log_id(request)
    epoch = query_int(request, "epoch", None, 0, 2**62)
    of = query_int(request, "of", None, 0, 2**62)
    if epoch is None or of is None:
        raise InvalidArgument("give epoch (the caller's) and of (the epoch asked about)")
    return web.json_response(leader.epoch_end(host, log_id, epoch, of))


async def fence(request: web.Request) -> web.Response:
    host = _host(request)
    log_id = _log_id(request)
    epoch = query_int(request, "epoch", None, 1, 2**62)
    if epoch is None:
        raise InvalidArgument("a fence needs the new epoch")
    return web.json_response(host.fence(log_id, epoch))


async def status(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    generation = rt.routing.table.generation
    if rt.replicas is None:  # not replicated: nothing to report, which is no error
        doc = {"node": rt.settings.node_id, "logs": {}, "under_replicated": []}
    else:
        doc = rt.replicas.status()
    return web.json_response({**doc, "generation": generation})


async def offer_routing(request: web.Request) -> web.Response:
    """The controller hands over a newer routing table (the node's watcher acts on it)."""
    rt = runtime_of(request)
    table = parse_routing(await json_body(request))
    taken = rt.routing.offer(table)
    return web.json_response({"generation": rt.routing.table.generation, "taken": taken})


def register(app: web.Application) -> None:
    app.router.add_get("/v1/replication/logs/{log}/fetch", fetch)
    app.router.add_get("/v1/replication/logs/{log}/epoch-end", epoch_end)
    app.router.add_post("/v1/replication/logs/{log}/fence", fence)
    app.router.add_get("/v1/replication/status", status)
    app.router.add_put("/v1/replication/routing", offer_routing)
