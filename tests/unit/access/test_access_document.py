"""The access document: parsing refuses every malformed part and changes nothing; edits keep
the model whole (a deleted user keeps no rule); matching and the implied describe."""

from __future__ import annotations

import pytest

from storage_node.access.document import (
    AccessDocument,
    AclRule,
    Operation,
    Pattern,
    ResourceType,
    User,
    new_token,
    parse_access,
    parse_rule,
    token_digest,
)
from storage_node.errors import InvalidArgument, NotFound

TOKEN = new_token()
DOC = {
    "version": 1,
    "generation": 3,
    "users": [
        {"name": "orders-app", "token_sha256": token_digest(TOKEN), "tls_subject": None},
        {"name": "audit", "token_sha256": None, "tls_subject": "CN=audit"},
    ],
    "acls": [
        {
            "user": "orders-app",
            "operation": "write",
            "resource": "topic",
            "pattern": "prefix",
            "name": "orders-",
        },
        {"user": "audit", "operation": "read", "resource": "group", "name": "audit"},
    ],
}


def test_round_trip_and_lookups() -> None:
    doc = parse_access(DOC)
    assert parse_access(doc.to_json()) == doc
    assert doc.generation == 3
    user = doc.user_by_token(TOKEN)
    assert user is not None and user.name == "orders-app"
    assert doc.user_by_token(TOKEN + "x") is None
    assert doc.user_by_subject("CN=audit") == doc.user("audit")
    assert doc.rules_of("audit")[0].pattern is Pattern.LITERAL  # the default pattern


def test_prefix_literal_and_implied_describe() -> None:
    doc = parse_access(DOC)
    assert doc.allows("orders-app", Operation.WRITE, ResourceType.TOPIC, "orders-eu")
    assert not doc.allows("orders-app", Operation.WRITE, ResourceType.TOPIC, "payments")
    assert not doc.allows("orders-app", Operation.READ, ResourceType.TOPIC, "orders-eu")
    assert doc.allows("orders-app", Operation.DESCRIBE, ResourceType.TOPIC, "orders-eu")
    assert not doc.allows("orders-app", Operation.WRITE, ResourceType.GROUP, "orders-eu")
    assert doc.allows("audit", Operation.READ, ResourceType.GROUP, "audit")
    assert not doc.allows("audit", Operation.READ, ResourceType.GROUP, "audit-2")
    assert not doc.allows("nobody", Operation.DESCRIBE, ResourceType.TOPIC, "orders-eu")


def _with(**change: object) -> dict[str, object]:
    return {**DOC, **change}


BAD = [
    ([], "JSON object"),
    (_with(version=2), "version"),
    (_with(generation=-1), "generation"),
    (_with(generation=True), "generation"),
    (_with(users={}), "lists"),
    (_with(users=[{"name": "a b", "tls_subject": "CN=x"}], acls=[]), "user name"),
    (_with(users=[{"name": "a"}], acls=[]), "neither a token"),
    (_with(users=[{"name": "a", "token_sha256": "ABC"}], acls=[]), "hex"),
    (_with(users=[{"name": "a", "tls_subject": "CN=a", "x": 1}], acls=[]), "unknown user"),
    (_with(users=[DOC["users"][0], DOC["users"][0]], acls=[]), "twice"),  # type: ignore[index]
    (
        _with(
            users=[
                {"name": "a", "token_sha256": "0" * 64},
                {"name": "b", "token_sha256": "0" * 64},
            ],
            acls=[],
        ),
        "share one token",
    ),
    (
        _with(users=[{"name": "a", "tls_subject": "CN=x"}, {"name": "b", "tls_subject": "CN=x"}]),
        "certificate subject",
    ),
    (
        _with(acls=[{"user": "ghost", "operation": "read", "resource": "topic", "name": "t"}]),
        "unknown",
    ),
    (_with(acls=[{"user": "audit", "operation": "fly", "resource": "topic", "name": "t"}]), "fly"),
    (_with(acls=[{"user": "audit", "operation": "read", "resource": "node", "name": "t"}]), "node"),
    (
        _with(acls=[{"user": "audit", "operation": "read", "resource": "topic", "name": "a/b"}]),
        "name",
    ),
]


@pytest.mark.parametrize(("raw", "words"), BAD, ids=[w for _, w in BAD])
def test_every_malformed_document_is_refused_whole(raw: object, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        parse_access(raw)


def test_edits() -> None:
    doc = parse_access(DOC)
    rule = parse_rule({"user": "audit", "operation": "read", "resource": "topic", "name": "t"})
    added = doc.with_rule(rule)
    assert rule in added.acls and added.generation == doc.generation
    assert added.with_rule(rule) is added  # already there: nothing to change
    assert added.without_rule(rule) == doc
    with pytest.raises(NotFound):
        doc.without_rule(rule)
    with pytest.raises(NotFound, match="create it"):
        doc.with_rule(AclRule("ghost", Operation.READ, ResourceType.TOPIC, Pattern.LITERAL, "t"))
    with pytest.raises(InvalidArgument, match="exists already"):
        doc.with_user(User("audit", tls_subject="CN=other"))
    with pytest.raises(InvalidArgument, match="share one token"):
        doc.with_user(User("copy", token_sha256=token_digest(TOKEN)))
    gone = added.without_user("audit")
    assert gone.user("audit") is None and gone.rules_of("audit") == ()
    assert gone.user("orders-app") is not None  # the others keep theirs
    with pytest.raises(NotFound):
        gone.without_user("audit")
    # the name lookup follows the edits (no stale entry of a removed user)
    assert AccessDocument().with_user(User("a", tls_subject="CN=a")).user("a") is not None
    assert gone.user_by_subject("CN=audit") is None
