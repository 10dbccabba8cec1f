"""Build the aiohttp application of one node around a NodeRuntime."""

from __future__ import annotations

from aiohttp import web

from storage_node.server import (
    routes_admin,
    routes_compaction,
    routes_groups,
    routes_health,
    routes_messages,
    routes_replication,
    routes_topics,
)
from storage_node.server.app_keys import METRICS, RUNTIME
from storage_node.server.metrics import NodeMetrics
from storage_node.server.middleware import auth_middleware, errors_middleware, metrics_middleware
from storage_node.server.runtime import NodeRuntime


def create_app(runtime: NodeRuntime) -> web.Application:
    """The node's HTTP API; the body size limit applies to every request."""
    settings = runtime.settings
    metrics = NodeMetrics(runtime)
    app = web.Application(
        client_max_size=settings.max_body_bytes,
        middlewares=[
            metrics_middleware(metrics),
            errors_middleware,
            auth_middleware(settings.token, settings.read_token),
        ],
    )
    app[RUNTIME] = runtime
    app[METRICS] = metrics
    for module in (
        routes_health,
        routes_topics,
        routes_messages,
        routes_groups,
        routes_admin,
        routes_compaction,
        routes_replication,
    ):
        module.register(app)
    return app
