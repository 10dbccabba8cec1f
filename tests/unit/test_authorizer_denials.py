"""What the authorizer adds for front ends that authenticate once per connection (the Kafka
listener): a check by resource type (an idempotent producer needs WRITE on some topic), the
question whether a user's token still holds after the access file changed, and the one
place a denial is logged and counted for ``msgstore_access_denied_total``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from storage_node.access.access_file import AccessFile, write_access_file
from storage_node.access.authorizer import ANONYMOUS, READER, SUPER_USER, Authorizer
from storage_node.access.document import (
    AccessDocument,
    AclRule,
    Operation,
    Pattern,
    ResourceType,
    User,
    token_digest,
)
from storage_node.errors import Forbidden
from storage_node.server.metrics import NodeMetrics
from storage_node.server.runtime import NodeRuntime
from storage_node.server.settings import NodeSettings

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
R, W, D = Operation.READ, Operation.WRITE, Operation.DESCRIBE


def document(generation: int, *users: tuple[str, str], rules: tuple[AclRule, ...] = ()):
    return AccessDocument(
        generation=generation,
        users=tuple(User(name, token_sha256=token_digest(token)) for name, token in users),
        acls=rules,
    )


@pytest.fixture
def setup(tmp_path: Path):
    path = tmp_path / "access.json"
    rules = (
        AclRule("writer", W, TOPIC, Pattern.PREFIX, "orders-"),
        AclRule("reader", R, GROUP, Pattern.LITERAL, "g"),
    )
    write_access_file(path, document(1, ("writer", "tw"), ("reader", "tr"), rules=rules))
    auth = Authorizer("super", "ro", AccessFile(path, check_interval_s=0))
    return path, auth


def test_allows_any_is_a_rule_of_that_operation_on_that_resource_type(setup):
    _, auth = setup
    writer, reader = auth.authenticate("tw"), auth.authenticate("tr")
    assert writer is not None and reader is not None
    assert auth.allows_any(writer, W, TOPIC)
    assert not auth.allows_any(writer, W, GROUP)
    assert auth.allows_any(writer, D, TOPIC)  # describe is implied by any rule
    assert not auth.allows_any(reader, W, TOPIC)
    assert auth.allows_any(reader, R, GROUP)
    assert auth.allows_any(SUPER_USER, W, TOPIC) and auth.allows_any(ANONYMOUS, W, TOPIC)
    assert not auth.allows_any(READER, W, TOPIC) and auth.allows_any(READER, R, TOPIC)


def test_still_holds_until_the_user_is_removed_or_its_token_changes(setup):
    path, auth = setup
    writer = auth.authenticate("tw")
    assert writer is not None and auth.still_holds(writer, "tw")
    assert not auth.still_holds(writer, "other")
    write_access_file(path, document(2, ("writer", "tw2"), ("reader", "tr")))
    assert not auth.still_holds(writer, "tw")  # token rotated
    write_access_file(path, document(3, ("reader", "tr")))
    assert not auth.still_holds(writer, "tw2")  # removed
    assert auth.still_holds(SUPER_USER, "anything") and auth.still_holds(READER, "x")


def test_a_certificate_login_holds_until_its_user_goes_or_its_subject_changes(tmp_path: Path):
    """The Kafka listener's certificate login (kafka/sasl.certificate_login): a subject that
    names a user makes the connection that user without SASL; an unknown one leaves it
    unauthenticated; removing the user or changing its ``tls_subject`` ends it at the
    connection's next request (``Session.refusal``)."""
    from storage_node.kafka.sasl import Session, certificate_login

    path = tmp_path / "access.json"

    def users(*pairs: tuple[str, str]) -> None:
        doc = AccessDocument(
            generation=len(pairs) + 1,
            users=tuple(User(name, tls_subject=subject) for name, subject in pairs),
        )
        write_access_file(path, doc)

    users(("carol", "CN=carol"))
    auth = Authorizer("super", "", AccessFile(path, check_interval_s=0))
    session = Session(required=True)
    certificate_login(session, auth, "CN=carol")
    assert session.principal is not None and session.principal.name == "carol"
    assert session.refusal(0, "Produce", auth) is None
    stranger = Session(required=True)
    certificate_login(stranger, auth, "CN=mallory")
    assert not stranger.authenticated
    users(("carol", "CN=carol,O=elsewhere"))
    assert "certificate subject changed" in (session.refusal(0, "Produce", auth) or "")
    users(("carol", "CN=carol"))
    assert session.refusal(0, "Produce", auth) is None
    users(("dave", "CN=dave"))
    assert "removed" in (session.refusal(0, "Produce", auth) or "")


def test_a_denial_is_logged_with_who_what_and_from_where_and_counted(
    setup, caplog: pytest.LogCaptureFixture
):
    _, auth = setup
    writer = auth.authenticate("tw")
    assert writer is not None
    caplog.set_level(logging.WARNING, "msgstore.access")
    with pytest.raises(Forbidden):
        auth.check(writer, W, TOPIC, "payments", source="127.0.0.1:5000")
    auth.denied(writer, "write", "cluster", "idempotent producer", "127.0.0.1:5001")
    auth.check(writer, W, TOPIC, "orders-eu")  # allowed: neither logged nor counted
    first, second = caplog.records
    assert first.getMessage() == "access denied: writer may not write topic payments"
    assert (first.principal, first.operation, first.resource, first.source) == (  # type: ignore[attr-defined]
        "writer",
        "write",
        "topic:payments",
        "127.0.0.1:5000",
    )
    assert second.resource == "cluster:idempotent producer"  # type: ignore[attr-defined]
    assert auth.denial_counts() == {("write", "topic"): 1, ("write", "cluster"): 1}


def test_the_metrics_page_has_every_series_from_the_start(tmp_path: Path):
    runtime = NodeRuntime(NodeSettings(data_dir=str(tmp_path), token="t"))
    try:
        metrics = NodeMetrics(runtime)
        page = generate_latest(metrics.registry).decode()
        assert 'msgstore_access_denied_total{operation="write",resource="topic"} 0.0' in page
        assert 'msgstore_access_denied_total{operation="read",resource="group"} 0.0' in page
        runtime.authorizer.denied(READER, "write", "topic", "t")
        runtime.authorizer.denied(READER, "write", "cluster", "idempotent producer")
        page = generate_latest(metrics.registry).decode()
        assert 'msgstore_access_denied_total{operation="write",resource="topic"} 1.0' in page
        assert 'msgstore_access_denied_total{operation="write",resource="cluster"} 1.0' in page
    finally:
        runtime.executor.shutdown()


def test_a_denial_line_carries_its_fields_in_json_and_text(setup, capsys):
    import json

    from storage_node import structured_log

    _, auth = setup
    writer = auth.authenticate("tw")
    assert writer is not None
    for fmt in ("json", "text"):
        structured_log.configure("n0", "INFO", fmt, ["tw"])
        try:
            auth.denied(writer, "write", "topic", "payments", "127.0.0.1:5000")
        finally:
            logging.getLogger().handlers.clear()
        line = capsys.readouterr().err.strip()
        if fmt == "json":
            doc = json.loads(line)
            assert doc["component"] == "access"
            assert (doc["principal"], doc["operation"], doc["resource"], doc["source"]) == (
                "writer",
                "write",
                "topic:payments",
                "127.0.0.1:5000",
            )
        else:
            assert line.endswith(
                "[principal=writer operation=write resource=topic:payments source=127.0.0.1:5000]"
            ), line
