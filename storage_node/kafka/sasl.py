"""SASL on the Kafka listener (SaslHandshake 17, SaslAuthenticate 36): who a connection is.

A node with a token requires SASL on every Kafka connection: before it has authenticated,
a connection is served ApiVersions, SaslHandshake and SaslAuthenticate only (anything else
closes it, with the reason in the node's log). The credential is checked by the node's
authorizer (``storage_node.access``), the one the HTTP API asks, and the principal it proves
is kept on the connection: the node's token is the super-user, its read token the reader
(the two-token mode: reads only), a user's token that user. What each request may then do
is the ACL check of its API (``kafka.acl``).

Mechanisms: PLAIN (RFC 4616: the token is the password; for a user's token the username
must be the user's name, for the node's tokens any username; an authorization id, if sent,
must equal the username) and OAUTHBEARER (RFC 7628: the token is the bearer value).
SaslHandshake v1 is followed by SaslAuthenticate requests (what librdkafka and the Java
client send); after SaslHandshake v0 the next frame is the bare SASL token, answered by an
empty frame, as Kafka's broker does. A wrong token is answered SASL_AUTHENTICATION_FAILED
and the connection closed.

With TLS on, a connection whose verified client certificate names a user (its
``tls_subject``) is that user without SASL (``certificate_login``), as on HTTPS.

Revocation: a user's connection is closed at its next request once the access document no
longer holds that user with that token (removed, or its token rotated); the client
reconnects and its authentication fails. ACL changes need no such step: every request is
checked against the document in force.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.access.authorizer import ANONYMOUS, Authorizer, Principal, PrincipalKind
from storage_node.kafka.acl import NEEDS
from storage_node.kafka.registry import Api, ApiTable, RequestContext

MECHANISMS = ("PLAIN", "OAUTHBEARER")
SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
PRE_AUTH_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
PRE_AUTH_MAX_BYTES = 512 * 1024  # the largest frame before authentication (Kafka's default)


@dataclass
class Session:
    """One connection's authentication state."""

    required: bool  # the node has a token
    mechanism: str | None = None  # chosen by SaslHandshake
    raw_next: bool = False  # after SaslHandshake v0: the next frame is a bare SASL token
    principal: Principal | None = None  # who authenticated (anyone on a node without token)
    token: str = ""  # the token it authenticated with: does it still hold? (revocation)
    subject: str | None = None  # or the client certificate subject it authenticated with
    close_reason: str | None = None  # close the connection once this answer is sent

    def __post_init__(self) -> None:
        if not self.required:
            self.principal = ANONYMOUS

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def refusal(self, api_key: int, api_name: str, authorizer: Authorizer) -> str | None:
        """Why this connection may not send this API at all (None: it may)."""
        who = self.principal
        if who is None:
            if api_key in PRE_AUTH_APIS:
                return None
            return f"{api_name} before SASL authentication (the node requires a token)"
        if self.subject is not None and not authorizer.still_holds_subject(who, self.subject):
            return (
                f"user {who.name} was removed or its certificate subject changed since this "
                "connection authenticated"
            )
        if self.subject is None and not authorizer.still_holds(who, self.token):
            return (
                f"user {who.name} was removed or its token changed since this connection "
                "authenticated"
            )
        if api_key not in NEEDS and not who.is_super:
            return f"{api_name} has no ACL mapping: only the super-user may send it"
        return None


@dataclass(frozen=True)
class Credentials:
    token: str
    username: str | None = None  # PLAIN's authentication id (OAUTHBEARER: none)
    authzid: str = ""  # PLAIN's authorization id (empty: none)


def credentials_of(mechanism: str, auth_bytes: bytes) -> Credentials | None:
    """What a client's first SASL message carries (None: the message is malformed)."""
    try:
        text = auth_bytes.decode()
    except UnicodeDecodeError:
        return None
    if mechanism == "PLAIN":  # [authzid] NUL authcid NUL passwd
        parts = text.split("\0")
        if len(parts) == 3 and parts[1] and parts[2]:
            return Credentials(parts[2], parts[1], parts[0])
        return None
    if mechanism == "OAUTHBEARER":  # gs2-header ^A auth=Bearer <token> ^A ... ^A^A
        for item in text.split("\x01")[1:]:
            key, _, value = item.partition("=")
            scheme, _, bearer = value.partition(" ")
            if key == "auth" and scheme.lower() == "bearer" and bearer.strip():
                return Credentials(bearer.strip())
    return None


def certificate_login(session: Session, authorizer: Authorizer, subject: str | None) -> None:
    """A TLS connection whose client certificate (verified against the store's CA bundle)
    names a user (its ``tls_subject``, MessageStoreUser authentication ``tls``) is that user
    from the start, without SASL, as on Kafka's SSL listeners and the HTTPS API. A subject
    no user has proves no one: the connection must then authenticate with SASL."""
    if not session.required or subject is None:
        return
    who = authorizer.authenticate_subject(subject)
    if who is not None:
        session.principal, session.subject = who, subject


def authenticate(session: Session, authorizer: Authorizer, auth_bytes: bytes) -> str | None:
    """Check the client's SASL message; None when it authenticated (the principal is kept
    on the session), else the reason."""
    assert session.mechanism is not None
    given = credentials_of(session.mechanism, auth_bytes)
    if given is None:
        return f"a malformed {session.mechanism} message"
    if given.authzid and given.authzid != given.username:
        return "an authorization id other than the username is not supported"
    principal = authorizer.authenticate(given.token)
    if principal is None:
        return f"the password of {given.username or 'the bearer'} is not a valid token"
    if (
        principal.kind is PrincipalKind.USER
        and given.username is not None
        and given.username != principal.name
    ):
        return f"the username {given.username!r} is not the name of the token's user"
    session.principal, session.token, session.subject = principal, given.token, None
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
    elif session.mechanism is not None or session.principal is not None:
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
    if session.mechanism is None or session.raw_next or session.principal is not None:
        code, message = ErrorCode.illegal_sasl_state, "SaslAuthenticate out of order"
        session.close_reason = message
    else:
        failure = authenticate(session, ctx.node.runtime.authorizer, bytes(request.auth_bytes))
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
