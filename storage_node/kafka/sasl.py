"""SASL on the Kafka listener (SaslHandshake 17, SaslAuthenticate 36) and what a connection
may do once authenticated.

A node with a token requires SASL on every Kafka connection: before it has authenticated,
a connection is served ApiVersions, SaslHandshake and SaslAuthenticate only (anything else
closes it, with the reason in the node's log). The password is checked by the same function
as the HTTP API's bearer token (``server.auth.token_role``), so the two protocols grant the
same two roles: the full token everything, the read token the APIs in ``READ_APIS`` only.
A write API of ``ANSWERS_DENIAL`` from a read-only connection is answered with its
authorization error (TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED) by its handler, which
then stores nothing; any other API outside ``READ_APIS`` closes the connection.

Mechanisms: PLAIN (RFC 4616: the token is the password, any username) and OAUTHBEARER
(RFC 7628: the token is the bearer value). SaslHandshake v1 is followed by SaslAuthenticate
requests (what librdkafka and the Java client send); after SaslHandshake v0 the next frame is
the bare SASL token, answered by an empty frame, as Kafka's broker does. A wrong token is
answered SASL_AUTHENTICATION_FAILED and the connection closed.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.kafka.registry import Api, ApiTable, RequestContext
from storage_node.server.auth import Role, token_role

MECHANISMS = ("PLAIN", "OAUTHBEARER")
SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
PRE_AUTH_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
PRE_AUTH_MAX_BYTES = 512 * 1024  # the largest frame before authentication (Kafka's default)
# what the read token may ask: metadata, reading records and offsets, group membership and
# group reads (OffsetCommit is a write, as the HTTP API's offset POST is)
READ_APIS = PRE_AUTH_APIS | {
    3,  # Metadata
    1,  # Fetch
    2,  # ListOffsets
    23,  # OffsetForLeaderEpoch
    10,  # FindCoordinator
    11,  # JoinGroup
    14,  # SyncGroup
    12,  # Heartbeat
    13,  # LeaveGroup
    9,  # OffsetFetch
    16,  # ListGroups
    15,  # DescribeGroups
    32,  # DescribeConfigs
    60,  # DescribeCluster
}
# write APIs whose handlers answer a connection without write rights with their
# authorization error (``RequestContext.may_write``)
ANSWERS_DENIAL = frozenset(
    {
        0,  # Produce: TOPIC_AUTHORIZATION_FAILED per partition
        22,  # InitProducerId: CLUSTER_AUTHORIZATION_FAILED
        19,  # CreateTopics: TOPIC_AUTHORIZATION_FAILED per topic
        20,  # DeleteTopics: likewise
        37,  # CreatePartitions: likewise
        8,  # OffsetCommit: GROUP_AUTHORIZATION_FAILED per partition
        42,  # DeleteGroups: GROUP_AUTHORIZATION_FAILED per group
        47,  # OffsetDelete: GROUP_AUTHORIZATION_FAILED
    }
)
READ_ONLY = "this token may only read; writes need the full token"


@dataclass
class Session:
    """One connection's authentication state."""

    required: bool  # the node has a token
    mechanism: str | None = None  # chosen by SaslHandshake
    raw_next: bool = False  # after SaslHandshake v0: the next frame is a bare SASL token
    role: Role | None = None
    close_reason: str | None = None  # close the connection once this answer is sent

    @property
    def authenticated(self) -> bool:
        return not self.required or self.role is not None

    @property
    def may_write(self) -> bool:
        return not self.required or self.role is Role.WRITE

    def refusal(self, api_key: int, api_name: str) -> str | None:
        """Why this connection may not send this API at all (None: it may)."""
        if not self.authenticated and api_key not in PRE_AUTH_APIS:
            return f"{api_name} before SASL authentication (the node requires a token)"
        if not self.may_write and api_key not in READ_APIS and api_key not in ANSWERS_DENIAL:
            return f"{api_name} with the read-only token"
        return None


def password_of(mechanism: str, auth_bytes: bytes) -> str | None:
    """The token a client's first SASL message carries (None: the message is malformed)."""
    try:
        text = auth_bytes.decode()
    except UnicodeDecodeError:
        return None
    if mechanism == "PLAIN":  # [authzid] NUL authcid NUL passwd
        parts = text.split("\0")
        return parts[2] if len(parts) == 3 and parts[1] else None
    if mechanism == "OAUTHBEARER":  # gs2-header ^A auth=Bearer <token> ^A ... ^A^A
        for item in text.split("\x01")[1:]:
            key, _, value = item.partition("=")
            scheme, _, bearer = value.partition(" ")
            if key == "auth" and scheme.lower() == "bearer" and bearer.strip():
                return bearer.strip()
    return None


def authenticate(session: Session, settings: Any, auth_bytes: bytes) -> str | None:
    """Check the client's SASL message; None when it authenticated, else the reason."""
    assert session.mechanism is not None
    given = password_of(session.mechanism, auth_bytes)
    if given is None:
        return f"a malformed {session.mechanism} message"
    role = token_role(given, settings.token or "", settings.read_token or "")
    if role is None:
        return "the password is not a valid token"
    session.role = role
    return None


def _session(ctx: RequestContext) -> Session:
    session = ctx.session
    assert isinstance(session, Session)
    return session


async def handshake(ctx: RequestContext, request: Any) -> Any:
    session = _session(ctx)
    code = ErrorCode.none
    if not session.required:
        code, session.close_reason = ErrorCode.illegal_sasl_state, "SASL on a node without a token"
    elif session.mechanism is not None or session.role is not None:
        code, session.close_reason = ErrorCode.illegal_sasl_state, "a second SaslHandshake"
    elif request.mechanism not in MECHANISMS:
        code = ErrorCode.unsupported_sasl_mechanism
        session.close_reason = f"SASL mechanism {request.mechanism!r} is not supported"
    else:
        session.mechanism = request.mechanism
        session.raw_next = ctx.api_version == 0
    return ctx.make("SaslHandshakeResponse", error_code=code, mechanisms=MECHANISMS)


async def authenticate_request(ctx: RequestContext, request: Any) -> Any:
    session = _session(ctx)
    if session.mechanism is None or session.raw_next or session.role is not None:
        code, message = ErrorCode.illegal_sasl_state, "SaslAuthenticate out of order"
        session.close_reason = message
    else:
        failure = authenticate(session, ctx.node.settings(), bytes(request.auth_bytes))
        code, message = ErrorCode.none, None
        if failure is not None:
            code, message = (
                ErrorCode.sasl_authentication_failed,
                f"authentication failed: {failure}",
            )
            session.close_reason = message
    return ctx.make(
        "SaslAuthenticateResponse",
        error_code=code,
        error_message=message,
        auth_bytes=b"",
        session_lifetime=datetime.timedelta(0),
    )


def register(table: ApiTable) -> None:
    table.add(Api(SASL_HANDSHAKE, "SaslHandshake", 0, 1, handshake))
    table.add(Api(SASL_AUTHENTICATE, "SaslAuthenticate", 0, 2, authenticate_request))
