"""The Kafka listener's SASL rules without a network: what a SASL message carries, which
APIs a connection may send before and after authenticating, and that every API the
listener serves is classed as a read or as a write that answers its denial."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from storage_node.kafka.listener import build_table
from storage_node.kafka.sasl import (
    ANSWERS_DENIAL,
    PRE_AUTH_APIS,
    READ_APIS,
    Session,
    authenticate,
    password_of,
)
from storage_node.server.auth import Role, token_role

SETTINGS = SimpleNamespace(token="full", read_token="ro")


@pytest.mark.parametrize(
    "mechanism, message, password",
    [
        ("PLAIN", b"\0user\0secret", "secret"),
        ("PLAIN", b"authz\0user\0secret", "secret"),
        ("PLAIN", b"\0\0secret", None),  # no username
        ("PLAIN", b"user\0secret", None),  # two fields
        ("PLAIN", b"\0u\0s\0x", None),  # four fields
        ("PLAIN", b"\0u\0\xff", None),  # not UTF-8
        ("OAUTHBEARER", b"n,,\x01auth=Bearer secret\x01\x01", "secret"),
        ("OAUTHBEARER", b"n,a=u,\x01host=h\x01auth=bearer  secret \x01\x01", "secret"),
        ("OAUTHBEARER", b"n,,\x01auth=Basic secret\x01\x01", None),
        ("OAUTHBEARER", b"n,,\x01auth=Bearer \x01\x01", None),
        ("OAUTHBEARER", b"auth=Bearer secret", None),  # no GS2 header
        ("SCRAM-SHA-256", b"\0u\0secret", None),
    ],
)
def test_password_of(mechanism: str, message: bytes, password: str | None):
    assert password_of(mechanism, message) == password


def test_the_token_check_is_the_http_apis():
    assert token_role("full", "full", "ro") is Role.WRITE
    assert token_role("ro", "full", "ro") is Role.READ
    assert token_role("other", "full", "ro") is None
    assert token_role("", "full", "") is None  # an empty read token is no token


@pytest.mark.parametrize(
    "message, role, failure",
    [
        (b"\0u\0full", Role.WRITE, None),
        (b"\0u\0ro", Role.READ, None),
        (b"\0u\0wrong", None, "not a valid token"),
        (b"garbage", None, "malformed"),
    ],
)
def test_authenticate_sets_the_role(message: bytes, role: Role | None, failure: str | None):
    session = Session(required=True, mechanism="PLAIN")
    result = authenticate(session, SETTINGS, message)
    assert session.role is role
    assert (result is None) if failure is None else (failure in str(result))


def test_before_authentication_only_versions_and_sasl_are_served():
    session = Session(required=True)
    for key in PRE_AUTH_APIS:
        assert session.refusal(key, "x") is None
    for key in (0, 1, 3, 19, 8, 11):
        assert "before SASL authentication" in str(session.refusal(key, "x"))


def test_a_read_only_session_may_read_and_is_answered_denial_for_writes():
    session = Session(required=True, mechanism="PLAIN", role=Role.READ)
    assert not session.may_write
    for key in READ_APIS | ANSWERS_DENIAL:
        assert session.refusal(key, "x") is None
    assert "read-only" in str(session.refusal(999, "Unlisted"))
    full = Session(required=True, mechanism="PLAIN", role=Role.WRITE)
    assert full.may_write and full.refusal(999, "Unlisted") is None


def test_a_node_without_a_token_requires_nothing():
    session = Session(required=False)
    assert session.authenticated and session.may_write
    assert session.refusal(0, "Produce") is None


def test_every_served_api_is_classed_as_a_read_or_a_write_that_answers_denial():
    """A new API must be put in READ_APIS or ANSWERS_DENIAL (and then check
    ``ctx.may_write``); unclassed, a read-only connection sending it is closed."""
    served = set(build_table().apis)
    assert not READ_APIS & ANSWERS_DENIAL
    assert served - READ_APIS - ANSWERS_DENIAL == set()
    assert {0, 8, 19, 20, 22, 37} <= ANSWERS_DENIAL


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
