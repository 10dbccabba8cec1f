"""Health, readiness, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from storage_node.server.app_keys import metrics_of, runtime_of
from storage_node.server.openapi import openapi_document


async def healthz(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    return web.json_response({"status": "ok", "node": rt.settings.node_id})


async def readyz(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    store = rt.store
    ready = store is not None and bool(getattr(store, "ready", True)) and not rt.draining
    doc = {
        "ready": ready,
        "node": rt.settings.node_id,
        "draining": rt.draining,
        "routing_error": rt.routing.last_error,
    }
    if store is None:
        doc["reason"] = rt.startup_error or "recovering"
    return web.json_response(doc, status=200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    """The Prometheus text format, or OpenMetrics when the scraper asks for it."""
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    # collectors read the stores: off the event loop, like every other store access
    data = await runtime_of(request).in_thread(encoder, metrics_of(request).registry)
    resp = web.Response(body=data)
    resp.headers["Content-Type"] = content_type
    return resp


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


def register(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/openapi.json", openapi)
