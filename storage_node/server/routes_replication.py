"""Replication routes (docs/REPLICATION.md): the log-shipping fetch, a log's epoch end, the
controller's fence, and the node's replication status.

Every request names a leader epoch; an older one than this node knows is refused (409
``fenced``), and a newer one tells a leader it was replaced, so it writes nothing more.
"""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from storage_node.errors import Fenced, InvalidArgument, NotFound, OffsetOutOfRange
from storage_node.formats.names import NAME_RE
from storage_node.replication import shipping
from storage_node.replication.epochs import check_epoch
from storage_node.replication.replicas import LogHost, topic_configs
from storage_node.server.app_keys import runtime_of
from storage_node.server.params import json_body, query_int
from storage_node.wire.routing_table import parse_routing

MAX_WAIT_MS = 10_000
ROLE_CHECK_S = 0.5  # a waiting fetch looks whether this node still leads


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
    topics = query_int(request, "topics", 0, 0, 2**31)
    follower = request.query.get("follower", "")
    if position is None or epoch is None or not follower:
        raise InvalidArgument("a fetch needs position, epoch and follower")
    hosted = host.logs.get(log_id)
    if hosted is not None and hosted.role == "leader" and epoch > hosted.epoch:
        hosted.stale = True  # a follower knows of a newer leader: this one is replaced
        raise Fenced(f"log {log_id!r}: epoch {epoch} replaced this leader's {hosted.epoch}")
    hosted = host.led(log_id)
    check_epoch(epoch, hosted.epoch, "a fetch")
    tracker = hosted.tracker
    assert tracker is not None
    log = hosted.store.log
    if position > log.shippable_end:
        raise InvalidArgument(
            f"the copy of log {log_id!r} ends at {position}, past the leader's {log.shippable_end}"
        )
    if position < log.start_pos:
        raise OffsetOutOfRange(
            f"log {log_id!r} starts at {log.start_pos} now", log_start=log.start_pos
        )
    tracker.ack(follower, position, log.durable_end)
    # bytes are shipped once written, before the leader's own fsync ends: the two disks work
    # at once; an append is still answered only after both (docs/REPLICATION.md)
    log.on_written = tracker.grew_elsewhere
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        grew = tracker.data
        segment, data = await rt.in_thread(log.read_frames, position, shipping.FETCH_BYTES)
        left = deadline - time.monotonic()
        if data or left <= 0 or hosted.stale or hosted.role != "leader":
            break
        try:  # the leader's writes wake us; the timeout only looks at its role again
            await asyncio.wait_for(grew.wait(), min(left, ROLE_CHECK_S))
        except TimeoutError:
            pass
    hosted.shipped_end = max(hosted.shipped_end, position + len(data))
    headers = {
        shipping.H_POSITION: str(position),
        shipping.H_SEGMENT: str(segment),
        shipping.H_EPOCH: str(hosted.epoch),
        shipping.H_EPOCHS: json.dumps(hosted.epochs.entries),
        shipping.H_DURABLE_END: str(log.durable_end),
        shipping.H_LOG_START: str(log.start_pos),
    }
    ip = hosted.node_ip()
    if ip:
        headers[shipping.H_NODE_IP] = ip
    if topics != len(hosted.store.topics.topics):
        headers[shipping.H_TOPICS] = json.dumps(topic_configs(hosted.store))
    return web.Response(body=data, headers=headers, content_type=shipping.CONTENT_TYPE)


async def epoch_end(request: web.Request) -> web.Response:
    """Where this leader's log says epoch ``of`` ended (KIP-101's OffsetsForLeaderEpoch)."""
    host = _host(request)
    log_id = _log_id(request)
    epoch = query_int(request, "epoch", None, 0, 2**62)
    of = query_int(request, "of", None, 0, 2**62)
    if epoch is None or of is None:
        raise InvalidArgument("give epoch (the caller's) and of (the epoch asked about)")
    hosted = host.led(log_id)
    check_epoch(epoch, hosted.epoch, "an epoch-end request")
    end = hosted.epochs.end_of(of, hosted.store.log.shippable_end)
    return web.json_response({"log": log_id, "epoch": hosted.epoch, "end": end})


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
