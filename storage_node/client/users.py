"""The user admin operations (users and ACL rules, super-user only; docs/SECURITY.md), as
steps both clients carry out: the answer of any node will do, since every node edits the
same access file."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from storage_node.client.core import ClientCore
from storage_node.client.steps import Op


def rule(user: str, operation: str, resource: str, name: str, pattern: str) -> dict[str, str]:
    return {
        "user": user,
        "operation": operation,
        "resource": resource,
        "pattern": pattern,
        "name": name,
    }


def list_users(core: ClientCore) -> Op[list[dict[str, Any]]]:
    return list((yield from core.any_node("GET", "/v1/users"))["users"])


def create_user(
    core: ClientCore, name: str, tls_subject: str | None, token: bool
) -> Op[dict[str, Any]]:
    body: dict[str, Any] = {"name": name, "token": token}
    if tls_subject is not None:
        body["tls_subject"] = tls_subject
    return (yield from core.any_node("POST", "/v1/users", json_body=body))


def delete_user(core: ClientCore, name: str) -> Op[dict[str, Any]]:
    return (yield from core.any_node("DELETE", f"/v1/users/{quote(name, safe='')}"))


def list_acls(core: ClientCore, user: str | None) -> Op[list[dict[str, Any]]]:
    doc = yield from core.any_node("GET", "/v1/acls", params={"user": user})
    return list(doc["acls"])


def change_acl(core: ClientCore, method: str, body: dict[str, str]) -> Op[dict[str, Any]]:
    return (yield from core.any_node(method, "/v1/acls", json_body=body))
