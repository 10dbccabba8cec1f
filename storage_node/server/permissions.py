"""What each HTTP route needs, declared once per route and checked in one place (the access
middleware, ``middleware.access_middleware``) before any handler runs.

A route is one of:

- ``PUBLIC``: no credential (health, readiness, metrics);
- ``ANY``: any authenticated principal; the answer holds only what the principal may see
  (topic and group listings, the routing table, a message by ID);
- ``RESOURCE``: one or more ACL checks, each an operation on a topic or group whose name
  comes from the path, the query or the JSON body;
- ``CLUSTER``: the super-user's (admin, replication, routing); the read token of the
  two-token mode keeps its GET routes (``operation`` describe);
- ``SUPER``: the super-user's only (users and ACL rules).

``tests/unit/test_route_permissions.py`` fails for a registered route without an entry.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from aiohttp import web

from storage_node.access.authorizer import Authorizer, Principal, PrincipalKind
from storage_node.access.document import Operation, ResourceType
from storage_node.errors import InvalidArgument

READ, WRITE, CREATE, DELETE, DESCRIBE, ALTER = (
    Operation.READ,
    Operation.WRITE,
    Operation.CREATE,
    Operation.DELETE,
    Operation.DESCRIBE,
    Operation.ALTER,
)
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP


class Kind(enum.Enum):
    PUBLIC = "public"
    ANY = "any"
    RESOURCE = "resource"
    CLUSTER = "cluster"
    SUPER = "super"


class From(enum.Enum):
    PATH = "path"
    QUERY = "query"
    BODY = "body"


@dataclass(frozen=True)
class Need:
    """One ACL check: ``operation`` on the ``resource`` named by ``field`` of ``source``.
    ``optional``: a query parameter that may be absent (the handler then answers only
    what the principal may see)."""

    operation: Operation
    resource: ResourceType
    source: From
    field: str
    optional: bool = False


@dataclass(frozen=True)
class Permission:
    kind: Kind
    needs: tuple[Need, ...] = ()
    operation: Operation = DESCRIBE  # CLUSTER and SUPER routes: what the call does
    changes: bool = False  # RESOURCE routes that change state under read checks (commits)

    @property
    def label(self) -> str:
        """How the audit log and the docs name what the route needs."""
        if self.kind is Kind.RESOURCE:
            return ", ".join(f"{n.operation.value} {n.resource.value}" for n in self.needs)
        return self.kind.value


def _on(operation: Operation, resource: ResourceType, source: From, field: str) -> Permission:
    return Permission(Kind.RESOURCE, (Need(operation, resource, source, field),))


PUBLIC = Permission(Kind.PUBLIC)
ANY = Permission(Kind.ANY)
CLUSTER_READ = Permission(Kind.CLUSTER, operation=DESCRIBE)
CLUSTER_CHANGE = Permission(Kind.CLUSTER, operation=ALTER)
SUPER_READ = Permission(Kind.SUPER, operation=DESCRIBE)
SUPER_CHANGE = Permission(Kind.SUPER, operation=ALTER)
P = From.PATH

# (method, route pattern) -> what it needs
PERMISSIONS: dict[tuple[str, str], Permission] = {
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    ("GET", "/v1/openapi.json"): ANY,
    # topics
    ("POST", "/v1/topics"): _on(CREATE, TOPIC, From.BODY, "name"),
    ("GET", "/v1/topics"): ANY,  # the topics the principal may describe
    ("GET", "/v1/topics/{topic}"): _on(DESCRIBE, TOPIC, P, "topic"),
    ("DELETE", "/v1/topics/{topic}"): _on(DELETE, TOPIC, P, "topic"),
    ("POST", "/v1/topics/{topic}/partitions"): _on(CREATE, TOPIC, P, "topic"),
    # messages
    ("POST", "/v1/topics/{topic}/messages"): _on(WRITE, TOPIC, P, "topic"),
    ("GET", "/v1/topics/{topic}/partitions/{partition}/messages"): _on(READ, TOPIC, P, "topic"),
    ("POST", "/v1/topics/{topic}/fetch"): _on(READ, TOPIC, P, "topic"),
    ("GET", "/v1/topics/{topic}/keys/{key}"): _on(READ, TOPIC, P, "topic"),
    ("GET", "/v1/messages/{msg_id}"): ANY,  # a message of an unreadable topic is a 404
    # consumer groups
    ("GET", "/v1/consumer-groups"): ANY,  # the groups the principal may describe
    ("POST", "/v1/consumer-groups/{group}/offsets"): Permission(
        Kind.RESOURCE,
        (Need(READ, GROUP, P, "group"), Need(READ, TOPIC, From.BODY, "topic")),
        changes=True,
    ),
    ("GET", "/v1/consumer-groups/{group}/offsets"): Permission(
        Kind.RESOURCE,
        (
            Need(READ, GROUP, P, "group"),
            Need(READ, TOPIC, From.QUERY, "topic", optional=True),
        ),
    ),
    # cluster and admin
    ("GET", "/v1/cluster"): ANY,  # the routes of the topics the principal may describe
    ("GET", "/v1/admin/files"): CLUSTER_READ,
    ("POST", "/v1/admin/compact"): CLUSTER_CHANGE,
    ("POST", "/v1/admin/drain"): CLUSTER_CHANGE,
    ("POST", "/v1/admin/seal"): CLUSTER_CHANGE,
    ("GET", "/v1/admin/sealed"): CLUSTER_READ,
    ("GET", "/v1/admin/files/{kind}/{name}"): CLUSTER_READ,
    ("PUT", "/v1/admin/files/{kind}/{name}/compacted"): CLUSTER_CHANGE,
    # replication: node to node and the controller
    ("GET", "/v1/replication/logs/{log}/fetch"): CLUSTER_READ,
    ("GET", "/v1/replication/logs/{log}/epoch-end"): CLUSTER_READ,
    ("POST", "/v1/replication/logs/{log}/fence"): CLUSTER_CHANGE,
    ("GET", "/v1/replication/status"): CLUSTER_READ,
    ("PUT", "/v1/replication/routing"): CLUSTER_CHANGE,
    # users and ACL rules
    ("GET", "/v1/users"): SUPER_READ,
    ("POST", "/v1/users"): SUPER_CHANGE,
    ("DELETE", "/v1/users/{name}"): SUPER_CHANGE,
    ("GET", "/v1/acls"): SUPER_READ,
    ("POST", "/v1/acls"): SUPER_CHANGE,
    ("DELETE", "/v1/acls"): SUPER_CHANGE,
}


def permission_of(method: str, route: str) -> Permission | None:
    return PERMISSIONS.get(("GET" if method == "HEAD" else method, route))


async def _name(request: web.Request, need: Need) -> str | None:
    """The resource name a check is about; None for an absent optional one."""
    if need.source is From.PATH:
        return request.match_info[need.field]
    if need.source is From.QUERY:
        value = request.query.get(need.field) or None
        if value is None and not need.optional:
            raise InvalidArgument(f"the {need.field!r} query parameter is required")
        return value
    raw = await request.read()  # kept by aiohttp: the handler reads the same bytes
    try:
        body = json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"the body is not valid JSON: {exc}") from None
    value = body.get(need.field) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"the body must be a JSON object with a {need.field!r} string")
    return value


async def authorize(
    request: web.Request, who: Principal, permission: Permission, authorizer: Authorizer
) -> None:
    """Raise ``Forbidden`` (logged and counted) unless ``who`` may call the route."""
    if who.is_super or permission.kind in (Kind.PUBLIC, Kind.ANY):
        return
    source = request.remote or ""
    what = f"{request.method} {request.path}"
    if permission.kind is Kind.SUPER:
        raise authorizer.denial(who, permission.operation, "cluster", what, source)
    if permission.kind is Kind.CLUSTER:
        authorizer.check_cluster(who, permission.operation, what, source)
        return
    for need in permission.needs:
        name = await _name(request, need)
        if name is None:
            continue
        if permission.changes and who.kind is PrincipalKind.READER:
            # the read token changes nothing, even where reading is the right it needs
            raise authorizer.denial(who, need.operation, need.resource.value, name, source)
        authorizer.check(who, need.operation, need.resource, name, source)
