"""Cluster and admin routes: routing table, file listing, compaction, drain, and the remote
compaction exchange (hand out sealed files, take back verified compacted replacements)."""

from __future__ import annotations

import json
import time
import zlib

from aiohttp import web

from storage_node.access.authorizer import PrincipalKind
from storage_node.access.document import ResourceType
from storage_node.errors import InvalidArgument
from storage_node.server.api_models import Drain, parse
from storage_node.server.app_keys import metrics_of, principal_of, runtime_of
from storage_node.server.params import file_params, int_value, json_body, log_param
from storage_node.wire.message_json import file_info_to_json
from storage_node.wire.routing_table import DELETED_TOPICS

CRC_HEADER = "X-Msgstore-Crc32"


async def cluster(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    rt.routing.refresh_if_changed()
    doc = rt.routing.current().to_json()
    who = principal_of(request)
    if who.kind is PrincipalKind.USER:  # only the routes of topics it may describe
        for key in ("topics", DELETED_TOPICS):
            names = doc.get(key) or {}
            shown = rt.authorizer.describable(who, ResourceType.TOPIC, names)
            if key in doc:
                doc[key] = {t: v for t, v in names.items() if t in shown}
    resp = web.json_response(doc)
    resp.headers["X-Msgstore-Node"] = rt.settings.node_id
    return resp


async def list_files(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    files = await rt.partitions.list_files(log_param(request))
    return web.json_response(
        {"node": rt.settings.node_id, "files": [file_info_to_json(f) for f in files]}
    )


async def compact(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    log_id = log_param(request)
    started = time.perf_counter()
    report = await rt.partitions.compact(log_id)
    seconds = time.perf_counter() - started
    metrics_of(request).compaction_seconds.observe(seconds)
    body = json.loads(json.dumps(report, default=str))
    return web.json_response({"node": rt.settings.node_id, "seconds": seconds, "report": body})


async def drain(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    rt.draining = parse(Drain, await json_body(request)).draining
    return web.json_response({"node": rt.settings.node_id, "draining": rt.draining})


async def sealed_files(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    files = await rt.partitions.sealed_files(log_param(request))
    return web.json_response(
        {
            "node": rt.settings.node_id,
            "address": rt.settings.address,
            "files": [file_info_to_json(f) for f in files],
        }
    )


async def fetch_file(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    kind, name = file_params(request)
    store = rt.partitions.exchange_store(log_param(request))
    data = await rt.in_thread(store.open_sealed, kind, name)
    return web.Response(
        body=data,
        content_type="application/octet-stream",
        headers={CRC_HEADER: str(zlib.crc32(data))},
    )


async def put_compacted(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    kind, name = file_params(request)
    rt.partitions.check_writable()
    store = rt.partitions.exchange_store(log_param(request))
    raw_crc = request.headers.get(CRC_HEADER)
    if raw_crc is None:
        raise InvalidArgument(f"the {CRC_HEADER} header (CRC-32 of the body) is required")
    crc = int_value(CRC_HEADER, raw_crc, 0, 2**32 - 1)
    data = await request.read()
    if not data:
        raise InvalidArgument("the compacted file body is empty")
    info = await rt.in_thread(store.commit_compacted, kind, name, data, crc)
    return web.json_response(file_info_to_json(info))


def register(app: web.Application) -> None:
    app.router.add_get("/v1/cluster", cluster)
    app.router.add_get("/v1/admin/files", list_files)
    app.router.add_post("/v1/admin/compact", compact)
    app.router.add_post("/v1/admin/drain", drain)
    app.router.add_get("/v1/admin/sealed", sealed_files)
    app.router.add_get("/v1/admin/files/{kind}/{name}", fetch_file)
    app.router.add_put("/v1/admin/files/{kind}/{name}/compacted", put_compacted)
