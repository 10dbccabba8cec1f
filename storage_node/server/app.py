"""Build the aiohttp application of one node around a NodeRuntime."""

from __future__ import annotations

from aiohttp import web

from storage_node.server import (
    routes_access,
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
from storage_node.server.middleware import access_middleware, errors_middleware, metrics_middleware
from storage_node.server.peer_auth import peer_auth_middleware
from storage_node.server.runtime import NodeRuntime


def create_app(runtime: NodeRuntime) -> web.Application:
    """The node's HTTP API; the body size limit applies to every request."""
    settings = runtime.settings
    metrics = NodeMetrics(runtime)
    runtime.observe_operation = metrics.observe  # the Kafka listener's requests beside HTTP's
    app = web.Application(
        client_max_size=settings.max_body_bytes,
        middlewares=[
            metrics_middleware(metrics),
            errors_middleware,
            access_middleware(runtime.authorizer),
            peer_auth_middleware(),  # mTLS: the routes only nodes call
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
        routes_access,
    ):
        module.register(app)
    return app
