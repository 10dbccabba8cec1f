"""The OpenAPI route entries of the user admin API (``routes_access.py``), beside the main
route table (``openapi_routes.py``, which is full)."""

from __future__ import annotations

from storage_node.access.document import USER_NAME
from storage_node.server import api_models_access as a
from storage_node.server.openapi_routes import WRITE_AUTH, Param, Reply, Route

SUPER_ONLY = "Super-user only (the node's token); docs/SECURITY.md, 'Users and ACLs'."
CHANGE = (
    SUPER_ONLY + " The change is written to the node's access file (generation + 1) and "
    "applies on every node sharing the file within a second; 409 access_managed when "
    "MessageStoreUser resources manage the users or the node has no writable access file."
)
USER = Param("name", "path", {"type": "string", "pattern": USER_NAME.pattern}, "user name")
RULE_PARAMS = tuple(
    Param(field, "query", {"type": "string"}, f"the rule's {field} (when there is no body)")
    for field in ("user", "operation", "resource", "pattern", "name")
)

ACCESS_ROUTES: tuple[Route, ...] = (
    Route(
        "get",
        "/v1/users",
        "the users of the access document (never their tokens)",
        {"200": Reply("users", a.UserList)},
        WRITE_AUTH,
        description=SUPER_ONLY,
    ),
    Route(
        "post",
        "/v1/users",
        "create a user; the answer holds its new token, shown this once",
        {"201": Reply("created", a.UserCreated)},
        ("400", "409", "413", *WRITE_AUTH),
        body=a.UserSpec,
        description=CHANGE,
    ),
    Route(
        "delete",
        "/v1/users/{name}",
        "delete a user and every ACL rule of it (its token stops working)",
        {"200": Reply("deleted", a.UserDeleted)},
        ("400", "404", "409", *WRITE_AUTH),
        params=(USER,),
        description=CHANGE,
    ),
    Route(
        "get",
        "/v1/acls",
        "the ACL rules (of one user with ?user=)",
        {"200": Reply("rules", a.AclList)},
        WRITE_AUTH,
        params=(Param("user", "query", {"type": "string"}, "only this user's rules"),),
        description=SUPER_ONLY,
    ),
    Route(
        "post",
        "/v1/acls",
        "add an ACL rule (201; 200 when it was there already)",
        {"201": Reply("added", a.AclChanged), "200": Reply("already there", a.AclChanged)},
        ("400", "404", "409", "413", *WRITE_AUTH),
        body=a.AclRule,
        description=CHANGE,
    ),
    Route(
        "delete",
        "/v1/acls",
        "remove an ACL rule, named by a JSON body or by the query",
        {"200": Reply("removed", a.AclChanged)},
        ("400", "404", "409", "413", *WRITE_AUTH),
        params=RULE_PARAMS,
        body=a.AclRule,
        description=CHANGE,
    ),
)
