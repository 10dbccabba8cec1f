"""Typed keys for objects stored on the aiohttp application."""

from __future__ import annotations

from aiohttp import web

from storage_node.access.authorizer import Principal
from storage_node.server.metrics import NodeMetrics
from storage_node.server.runtime import NodeRuntime

RUNTIME = web.AppKey("runtime", NodeRuntime)
METRICS = web.AppKey("metrics", NodeMetrics)
PRINCIPAL = web.RequestKey("principal", Principal)  # who asks (the access middleware)


def runtime_of(request: web.Request) -> NodeRuntime:
    return request.app[RUNTIME]


def metrics_of(request: web.Request) -> NodeMetrics:
    return request.app[METRICS]


def principal_of(request: web.Request) -> Principal:
    """Who sent the request, as the access middleware authenticated it."""
    return request[PRINCIPAL]
