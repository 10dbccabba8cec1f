"""The authorizer: which principal a credential proves, what each kind may do, and every
denial logged and counted by (operation, resource)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from storage_node.access.access_file import AccessFile, edit_access_file
from storage_node.access.authorizer import (
    ANONYMOUS,
    READER,
    SUPER_USER,
    Authorizer,
    PrincipalKind,
)
from storage_node.access.document import Operation, ResourceType, User, parse_rule, token_digest
from storage_node.errors import Forbidden

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP


@pytest.fixture
def authorizer(tmp_path: Path) -> Authorizer:
    path = tmp_path / "access.json"
    edit_access_file(path, lambda d: d.with_user(User("app", token_digest("app-token"))))
    rule = parse_rule(
        {"user": "app", "operation": "read", "resource": "topic", "pattern": "prefix", "name": "o-"}
    )
    edit_access_file(path, lambda d: d.with_rule(rule))
    return Authorizer("super", "reader", AccessFile(path, check_interval_s=0))


def test_credentials(authorizer: Authorizer) -> None:
    assert authorizer.authenticate("super") == SUPER_USER
    assert authorizer.authenticate("reader") == READER
    app = authorizer.authenticate("app-token")
    assert app is not None and app.kind is PrincipalKind.USER and app.name == "app"
    assert authorizer.authenticate("nope") is None
    assert Authorizer("", "").authenticate("anything") == ANONYMOUS
    compat = Authorizer("super", "reader")  # no access file: only the two tokens
    assert compat.authenticate("app-token") is None


def test_what_each_principal_may_do(authorizer: Authorizer) -> None:
    app = authorizer.authenticate("app-token")
    assert app is not None
    for who in (SUPER_USER, ANONYMOUS):
        assert authorizer.allows(who, Operation.DELETE, TOPIC, "x")
        assert authorizer.allows_cluster(who, Operation.ALTER)
    assert authorizer.allows(READER, Operation.READ, GROUP, "g")
    assert not authorizer.allows(READER, Operation.WRITE, TOPIC, "o-1")
    assert authorizer.allows_cluster(READER, Operation.DESCRIBE)
    assert not authorizer.allows_cluster(READER, Operation.ALTER)
    assert authorizer.allows(app, Operation.READ, TOPIC, "o-1")
    assert not authorizer.allows(app, Operation.READ, TOPIC, "p-1")
    assert not authorizer.allows_cluster(app, Operation.DESCRIBE)
    assert authorizer.readable(app, ["o-1", "p-1", "o-2"]) == {"o-1", "o-2"}
    assert authorizer.describable(app, TOPIC, ["o-1", "p-1"]) == {"o-1"}


def test_denials_are_logged_and_counted(
    authorizer: Authorizer, caplog: pytest.LogCaptureFixture
) -> None:
    app = authorizer.authenticate("app-token")
    assert app is not None
    with caplog.at_level(logging.WARNING, "msgstore.access"):
        with pytest.raises(Forbidden) as err:
            authorizer.check(app, Operation.WRITE, TOPIC, "o-1", "127.0.0.9")
        with pytest.raises(Forbidden):
            authorizer.check_cluster(app, Operation.ALTER, "POST /v1/admin/compact", "10.0.0.1")
    assert err.value.status == 403 and err.value.details["resource"] == "topic"
    assert authorizer.denial_counts() == {("write", "topic"): 1, ("alter", "cluster"): 1}
    record = caplog.records[0]
    assert record.__dict__["principal"] == "app" and record.__dict__["source"] == "127.0.0.9"
    assert record.__dict__["resource"] == "topic:o-1"
    authorizer.check(app, Operation.READ, TOPIC, "o-1")  # allowed: nothing counted
    assert sum(authorizer.denial_counts().values()) == 2
