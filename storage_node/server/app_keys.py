"""Typed keys for objects stored on the aiohttp application."""

from __future__ import annotations

from aiohttp import web

from storage_node.server.metrics import NodeMetrics
from storage_node.server.runtime import NodeRuntime

RUNTIME = web.AppKey("runtime", NodeRuntime)
METRICS = web.AppKey("metrics", NodeMetrics)


def runtime_of(request: web.Request) -> NodeRuntime:
    return request.app[RUNTIME]


def metrics_of(request: web.Request) -> NodeMetrics:
    return request.app[METRICS]
