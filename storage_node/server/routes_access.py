"""The user admin API, for clusters outside Kubernetes (``msgstore user|acl``): list, create
and delete users, list, add and remove ACL rules. Super-user only (``permissions.py``).

A change is made in the node's access file under its lock (read, change, generation + 1,
atomic write: ``access_file.edit_access_file``), so every node sharing the file (a
``msgstore local`` cluster) applies it within a second, and this node at once. Where the
file is managed from outside (``access_managed``: the operator writes it from
MessageStoreUser resources) or cannot be written, changes answer 409 ``access_managed``."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from storage_node.access.access_file import access_file_writable, edit_access_file
from storage_node.access.document import (
    AccessDocument,
    parse_rule,
    parse_user,
    rule_text,
    token_digest,
)
from storage_node.access.document import AclRule as Rule
from storage_node.access.document import new_token as make_token
from storage_node.errors import AccessManaged, InvalidArgument
from storage_node.server.api_models import parse
from storage_node.server.api_models_access import AclRule, UserSpec
from storage_node.server.app_keys import principal_of, runtime_of
from storage_node.server.params import json_body
from storage_node.server.runtime import NodeRuntime

log = logging.getLogger("msgstore.access")
MANAGED = (
    "users and ACL rules of this store are managed by MessageStoreUser resources (the "
    "access file is written from outside this node); change those resources instead"
)


def _managed(rt: NodeRuntime) -> bool:
    settings = rt.settings
    return settings.access_managed or (
        bool(settings.access_file) and not access_file_writable(settings.access_file)
    )


def _editable_file(rt: NodeRuntime) -> str:
    """The access file this node may change, else 409 saying why not."""
    path = rt.settings.access_file
    if not path:
        raise AccessManaged(
            "this node has no access file (MSGSTORE_ACCESS_FILE): it knows only its two "
            "tokens; give every node the same access file to have users"
        )
    if _managed(rt):
        raise AccessManaged(MANAGED)
    return path


def _user_json(doc: AccessDocument, name: str) -> dict[str, Any]:
    user = doc.user(name)
    assert user is not None
    return {
        "name": user.name,
        "has_token": bool(user.token_sha256),
        "tls_subject": user.tls_subject,
    }


def _rule_json(rule: Rule) -> dict[str, Any]:
    return {
        "user": rule.user,
        "operation": rule.operation.value,
        "resource": rule.resource.value,
        "pattern": rule.pattern.value,
        "name": rule.name,
    }


async def _change(request: web.Request, what: str, change: Any) -> AccessDocument:
    """Apply ``change`` to the access file, apply the result here, and audit it."""
    rt = runtime_of(request)
    path = _editable_file(rt)
    doc: AccessDocument = await rt.in_thread(edit_access_file, path, change)
    if rt.authorizer.access is not None:
        await rt.in_thread(rt.authorizer.access.refresh)
    who = principal_of(request)
    log.info(
        "access change by %s: %s (generation %d)",
        who.name,
        what,
        doc.generation,
        extra={
            "principal": who.name,
            "operation": request.method.lower(),
            "resource": what,
            "source": request.remote or "",
        },
    )
    return doc


async def list_users(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    doc = rt.authorizer.document()
    users = [_user_json(doc, u.name) for u in doc.users]
    return web.json_response(
        {"users": users, "generation": doc.generation, "managed": _managed(rt)}
    )


async def create_user(request: web.Request) -> web.Response:
    spec = parse(UserSpec, await json_body(request))
    if not spec.token and spec.tls_subject is None:
        raise InvalidArgument(
            "a user without a token needs a tls_subject (a certificate to prove it)"
        )
    token = make_token() if spec.token else None
    user = parse_user(
        {
            "name": spec.name,
            "token_sha256": token_digest(token) if token else None,
            "tls_subject": spec.tls_subject,
        }
    )
    doc = await _change(request, f"user {user.name} created", lambda d: d.with_user(user))
    answer = {**_user_json(doc, user.name), "token": token, "generation": doc.generation}
    return web.json_response(answer, status=201)


async def delete_user(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    parse_user({"name": name, "tls_subject": "-"})  # a clear 400 for a malformed name
    doc = await _change(
        request, f"user {name} deleted with its rules", lambda d: d.without_user(name)
    )
    return web.json_response({"name": name, "deleted": True, "generation": doc.generation})


async def list_acls(request: web.Request) -> web.Response:
    doc = runtime_of(request).authorizer.document()
    user = request.query.get("user") or None
    rules = doc.rules_of(user) if user is not None else doc.acls
    return web.json_response({"acls": [_rule_json(r) for r in rules], "generation": doc.generation})


async def _rule_of(request: web.Request, from_query: bool = False) -> Rule:
    """The rule a request names: its JSON body, or (``from_query``, no body) the query."""
    if from_query and not request.can_read_body:
        raw: Any = dict(request.query)
    else:
        raw = await json_body(request)
    spec = parse(AclRule, raw)
    return parse_rule(spec.model_dump())


async def add_acl(request: web.Request) -> web.Response:
    rule = await _rule_of(request)
    found: list[bool] = []

    def add(d: AccessDocument) -> AccessDocument:
        found.append(rule in d.acls)
        return d.with_rule(rule)

    doc = await _change(request, f"rule added: {rule_text(rule)}", add)
    changed = not found[0]
    return web.json_response(
        {"acl": _rule_json(rule), "changed": changed, "generation": doc.generation},
        status=201 if changed else 200,
    )


async def remove_acl(request: web.Request) -> web.Response:
    rule = await _rule_of(request, from_query=True)
    doc = await _change(request, f"rule removed: {rule_text(rule)}", lambda d: d.without_rule(rule))
    return web.json_response(
        {"acl": _rule_json(rule), "changed": True, "generation": doc.generation}
    )


def register(app: web.Application) -> None:
    app.router.add_get("/v1/users", list_users)
    app.router.add_post("/v1/users", create_user)
    app.router.add_delete("/v1/users/{name}", delete_user)
    app.router.add_get("/v1/acls", list_acls)
    app.router.add_post("/v1/acls", add_acl)
    app.router.add_delete("/v1/acls", remove_acl)
