"""Every route the node serves declares what it needs (server/permissions.py), and every
declaration names a served route: a new route without one fails here."""

from __future__ import annotations

from pathlib import Path

from storage_node.server.app import create_app
from storage_node.server.permissions import PERMISSIONS, Kind
from storage_node.server.runtime import NodeRuntime
from storage_node.server.settings import NodeSettings


def served_routes(tmp_path: Path) -> set[tuple[str, str]]:
    runtime = NodeRuntime(NodeSettings(data_dir=str(tmp_path)))
    try:
        app = create_app(runtime)
    finally:
        runtime.executor.shutdown()
    return {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD"
        and route.resource is not None
        # the web console's pages: their own login, outside /v1 (docs/CONSOLE.md)
        and not route.handler.__module__.startswith("storage_node.console.")
    }


def test_every_route_declares_its_permission(tmp_path: Path) -> None:
    served = served_routes(tmp_path)
    assert served - PERMISSIONS.keys() == set(), "routes without a declared permission"
    assert PERMISSIONS.keys() - served == set(), "permissions of routes nobody serves"


def test_only_health_and_metrics_are_public() -> None:
    public = {path for (_m, path), p in PERMISSIONS.items() if p.kind is Kind.PUBLIC}
    assert public == {"/healthz", "/readyz", "/metrics"}
    assert all(
        path.startswith("/v1/")
        for (_m, path), p in PERMISSIONS.items()
        if p.kind is not Kind.PUBLIC
    )


def test_user_and_replication_routes_are_the_super_users() -> None:
    for (method, path), permission in PERMISSIONS.items():
        if path.startswith(("/v1/users", "/v1/acls")):
            assert permission.kind is Kind.SUPER, (method, path)
        if path.startswith(("/v1/replication", "/v1/admin")):
            assert permission.kind is Kind.CLUSTER, (method, path)
            assert method == "GET" or permission.operation.value == "alter", (method, path)
