"""pydantic models of the user admin API's bodies (``routes_access.py``): users and ACL
rules, validated here and then by the access document's own rules (``access.document``),
so the API and the file accept exactly the same names."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from storage_node.access.document import RESOURCE_NAME, USER_NAME
from storage_node.server.api_models import Answer, Request

UserName = Field(pattern=USER_NAME.pattern, description="1-128 of A-Z a-z 0-9 . _ -")
OPERATIONS = Literal["read", "write", "create", "delete", "describe", "alter"]


class UserSpec(Request):
    """A new user. It gets a new random token (answered once, only its SHA-256 is kept)
    unless ``token`` is false; ``tls_subject`` lets a client certificate prove it too."""

    name: str = UserName
    tls_subject: str | None = Field(default=None, min_length=1)
    token: bool = True


class User(Answer):
    name: str
    has_token: bool
    tls_subject: str | None = None


class UserCreated(User):
    token: str | None = Field(description="the user's token: shown this once, never again")
    generation: int


class UserList(Answer):
    users: list[User]
    generation: int
    managed: bool = Field(description="true: changes go through MessageStoreUser resources")


class UserDeleted(Answer):
    name: str
    deleted: bool
    generation: int


class AclRule(Request):
    """A rule allowing ``user`` one operation on the topics or groups it names."""

    user: str = UserName
    operation: OPERATIONS
    resource: Literal["topic", "group"]
    pattern: Literal["literal", "prefix"] = "literal"
    name: str = Field(pattern=RESOURCE_NAME.pattern, description="name, or its prefix")


class AclList(Answer):
    acls: list[AclRule]
    generation: int


class AclChanged(Answer):
    acl: AclRule
    changed: bool = Field(description="false: the rule was there already (add)")
    generation: int
