"""The Kafka listener's SASL and ACL rules without a network: what a SASL message carries,
which principal it proves through the node's authorizer, which APIs a connection may send
before and after authenticating, and that every API the listener serves has its entry in
the ACL table (``kafka.acl.NEEDS``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_node.access.access_file import AccessFile, write_access_file
from storage_node.access.authorizer import ANONYMOUS, READER, SUPER_USER, Authorizer
from storage_node.access.document import AccessDocument, User, token_digest
from storage_node.kafka.acl import NEEDS
from storage_node.kafka.listener import build_table
from storage_node.kafka.sasl import (
    PRE_AUTH_APIS,
    Credentials,
    Session,
    authenticate,
    credentials_of,
)


@pytest.fixture
def users(tmp_path: Path) -> tuple[Path, Authorizer]:
    path = tmp_path / "access.json"
    doc = AccessDocument(generation=1, users=(User("orders-app", token_digest("user-tok")),))
    write_access_file(path, doc)
    return path, Authorizer("full", "ro", AccessFile(path, check_interval_s=0))


@pytest.mark.parametrize(
    "mechanism, message, credentials",
    [
        ("PLAIN", b"\0user\0secret", Credentials("secret", "user")),
        ("PLAIN", b"authz\0user\0secret", Credentials("secret", "user", "authz")),
        ("PLAIN", b"\0\0secret", None),  # no username
        ("PLAIN", b"\0u\0", None),  # no password
        ("PLAIN", b"user\0secret", None),  # two fields
        ("PLAIN", b"\0u\0s\0x", None),  # four fields
        ("PLAIN", b"\0u\0\xff", None),  # not UTF-8
        ("OAUTHBEARER", b"n,,\x01auth=Bearer secret\x01\x01", Credentials("secret")),
        ("OAUTHBEARER", b"n,a=u,\x01host=h\x01auth=bearer  secret \x01\x01", Credentials("secret")),
        ("OAUTHBEARER", b"n,,\x01auth=Basic secret\x01\x01", None),
        ("OAUTHBEARER", b"n,,\x01auth=Bearer \x01\x01", None),
        ("OAUTHBEARER", b"auth=Bearer secret", None),  # no GS2 header
        ("SCRAM-SHA-256", b"\0u\0secret", None),
    ],
)
def test_credentials_of(mechanism: str, message: bytes, credentials: Credentials | None):
    assert credentials_of(mechanism, message) == credentials


@pytest.mark.parametrize(
    "mechanism, message, principal, failure",
    [
        ("PLAIN", b"\0any\0full", "super-user", None),
        ("PLAIN", b"\0any\0ro", "reader", None),
        ("PLAIN", b"\0orders-app\0user-tok", "orders-app", None),
        ("PLAIN", b"orders-app\0orders-app\0user-tok", "orders-app", None),
        ("OAUTHBEARER", b"n,,\x01auth=Bearer user-tok\x01\x01", "orders-app", None),
        ("PLAIN", b"\0someone-else\0user-tok", None, "'someone-else' is not the name"),
        ("PLAIN", b"admin\0orders-app\0user-tok", None, "authorization id"),
        ("PLAIN", b"\0u\0wrong", None, "not a valid token"),
        ("PLAIN", b"garbage", None, "malformed"),
    ],
)
def test_authenticate_keeps_the_principal(
    users, mechanism: str, message: bytes, principal: str | None, failure: str | None
):
    _, authorizer = users
    session = Session(required=True, mechanism=mechanism)
    result = authenticate(session, authorizer, message)
    assert (session.principal.name if session.principal else None) == principal
    assert (result is None) if failure is None else (failure in str(result)), result


def test_before_authentication_only_versions_and_sasl_are_served(users):
    _, authorizer = users
    session = Session(required=True)
    for key in PRE_AUTH_APIS:
        assert session.refusal(key, "x", authorizer) is None
    for key in (0, 1, 3, 19, 8, 11):
        assert "before SASL authentication" in str(session.refusal(key, "x", authorizer))


def test_a_removed_user_or_a_rotated_token_ends_the_connection_at_its_next_request(users):
    path, authorizer = users
    session = Session(required=True, mechanism="PLAIN")
    assert authenticate(session, authorizer, b"\0orders-app\0user-tok") is None
    assert session.refusal(0, "Produce", authorizer) is None
    rotated = AccessDocument(generation=2, users=(User("orders-app", token_digest("new")),))
    write_access_file(path, rotated)
    assert "removed or its token changed" in str(session.refusal(0, "Produce", authorizer))
    write_access_file(path, AccessDocument(generation=3))
    assert "removed or its token changed" in str(session.refusal(18, "ApiVersions", authorizer))
    fresh = Session(required=True, mechanism="PLAIN")  # and a new connection cannot log in
    assert "not a valid token" in str(authenticate(fresh, authorizer, b"\0orders-app\0user-tok"))


def test_an_api_without_an_acl_entry_is_for_the_super_user_only(users):
    _, authorizer = users
    unlisted = max(NEEDS) + 1000
    for who, refused in ((SUPER_USER, False), (ANONYMOUS, False), (READER, True)):
        session = Session(required=True, principal=who)
        assert (session.refusal(unlisted, "Unlisted", authorizer) is not None) is refused
    user = Session(required=True, mechanism="PLAIN")
    assert authenticate(user, authorizer, b"\0orders-app\0user-tok") is None
    assert "no ACL mapping" in str(user.refusal(unlisted, "Unlisted", authorizer))


def test_a_node_without_a_token_requires_nothing():
    authorizer = Authorizer("", "")
    session = Session(required=authorizer.required)
    assert session.authenticated and session.principal is ANONYMOUS
    assert session.refusal(0, "Produce", authorizer) is None


def test_every_served_api_has_its_acl_entry():
    """A new API must get its entry in ``kafka.acl.NEEDS`` (and its handler the checks the
    entry names); without one, only the super-user may send it."""
    served = set(build_table().apis)
    assert served - set(NEEDS) == set(), "served APIs without an ACL entry"
    assert set(NEEDS) - served == set(), "ACL entries of APIs not served"
    writes = {key for key, need in NEEDS.items() if need.changes}
    assert writes == {0, 8, 19, 20, 22, 37}


def test_local_up_prints_the_kafka_client_settings():
    from storage_node.cli.local_commands import kafka_client_settings

    assert kafka_client_settings(False, None) == ""
    assert kafka_client_settings(False, "/d/tls/ca.crt") == (
        "security.protocol=SSL ssl.ca.location=/d/tls/ca.crt"
    )
    assert kafka_client_settings(True, None) == (
        "security.protocol=SASL_PLAINTEXT sasl.mechanisms=PLAIN "
        "sasl.username=any sasl.password=<the token>"
    )
    assert kafka_client_settings(True, "/d/tls/ca.crt").startswith("security.protocol=SASL_SSL")
