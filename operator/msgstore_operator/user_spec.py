"""The MessageStoreUser spec as typed values: the store, how the user authenticates, and
its ACL rules in the access document's own model (``storage_node.access``).

The CRD's CEL rules refuse bad specs at the API server; this parse checks the same again
(a spec may come from an older CRD, or from a test) with the access model's own validation,
so a rule the nodes would refuse never reaches the access document.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage_node.access.document import USER_NAME, AclRule, parse_rule
from storage_node.errors import InvalidArgument

MAX_RULES = 128
MAX_TLS_NAME = 64  # the common name of a certificate (RFC 5280 ub-common-name)
GROUP_OPERATIONS = ("read", "describe", "delete")


class Authentication(enum.StrEnum):
    TOKEN = "token"
    TLS = "tls"


class UserSpecProblem(ValueError):
    """The user's spec cannot be used as it is; the message says why."""


@dataclass(frozen=True)
class UserSpec:
    name: str
    store: str
    authentication: Authentication
    acls: tuple[AclRule, ...] = ()

    @property
    def tls_subject(self) -> str:
        """The RFC 4514 subject of the user's client certificate."""
        return f"CN={self.name}"


def _rule(user: str, index: int, raw: Any) -> AclRule:
    where = f"acls[{index}]"
    if not isinstance(raw, Mapping) or not isinstance(raw.get("resource"), Mapping):
        raise UserSpecProblem(f"{where} must have an operation and a resource")
    resource = raw["resource"]
    if resource.get("type") == "group" and raw.get("operation") not in GROUP_OPERATIONS:
        raise UserSpecProblem(f"{where}: a group rule allows only read, describe or delete")
    try:
        return parse_rule(
            {
                "user": user,
                "operation": raw.get("operation"),
                "resource": resource.get("type"),
                "pattern": resource.get("patternType") or "literal",
                "name": resource.get("name"),
            }
        )
    except InvalidArgument as exc:
        raise UserSpecProblem(f"{where}: {exc}") from None


def parse_user(body: Mapping[str, Any]) -> UserSpec:
    """A MessageStoreUser resource as a UserSpec; ``UserSpecProblem`` says what is wrong."""
    name = str((body.get("metadata") or {}).get("name") or "")
    if not USER_NAME.match(name):
        raise UserSpecProblem(f"user name {name!r} must be 1-128 letters, digits, '.', '_' or '-'")
    spec = body.get("spec") or {}
    store = spec.get("store")
    if not isinstance(store, str) or not store:
        raise UserSpecProblem("spec.store must name a MessageStore")
    kind = (spec.get("authentication") or {}).get("type")
    try:
        authentication = Authentication(str(kind))
    except ValueError:
        raise UserSpecProblem(
            f"spec.authentication.type must be token or tls, not {kind!r}"
        ) from None
    if authentication is Authentication.TLS and len(name) > MAX_TLS_NAME:
        raise UserSpecProblem(f"a tls user's name must be at most {MAX_TLS_NAME} characters")
    raw_acls = spec.get("acls") or []
    if not isinstance(raw_acls, list) or len(raw_acls) > MAX_RULES:
        raise UserSpecProblem(f"spec.acls must be a list of at most {MAX_RULES} rules")
    rules = tuple(_rule(name, i, raw) for i, raw in enumerate(raw_acls))
    return UserSpec(name, store, authentication, tuple(dict.fromkeys(rules)))
