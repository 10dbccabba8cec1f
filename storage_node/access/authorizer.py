"""Who is asking and may they: the one check every front end (HTTP routes, the Kafka
listener, the console through the HTTP API) calls before it touches a topic or group.

Principals:
- ``SUPER``: the node's token (``MSGSTORE_TOKEN``), the operator's and the peers' identity;
  everything is allowed.
- ``READER``: the node's read token (``MSGSTORE_READ_TOKEN``), the two-token compatibility
  mode: read and describe every topic and group, nothing else.
- ``USER``: a user of the access document; only what its ACL rules allow.
- ``ANONYMOUS``: a node configured with no token at all (development); everything allowed,
  as before users existed.
"""

from __future__ import annotations

import enum
import hmac
import logging
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from storage_node.access.access_file import AccessFile
from storage_node.access.document import (
    AccessDocument,
    Operation,
    ResourceType,
    token_digest,
)
from storage_node.errors import Forbidden

log = logging.getLogger("msgstore.access")


class PrincipalKind(enum.Enum):
    SUPER = "super"
    READER = "reader"
    USER = "user"
    ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Principal:
    name: str
    kind: PrincipalKind

    @property
    def is_super(self) -> bool:
        return self.kind in (PrincipalKind.SUPER, PrincipalKind.ANONYMOUS)


SUPER_USER = Principal("super-user", PrincipalKind.SUPER)
READER = Principal("reader", PrincipalKind.READER)
ANONYMOUS = Principal("anonymous", PrincipalKind.ANONYMOUS)
READER_OPERATIONS = frozenset({Operation.READ, Operation.DESCRIBE})
CLUSTER = "cluster"  # the resource of super-user routes (admin, replication, users), in logs


class Authorizer:
    """Authenticates credentials and answers ACL questions against the current document.

    ``access`` is None in the two-token mode (no access file configured): then only the
    node's two tokens exist."""

    def __init__(self, token: str, read_token: str, access: AccessFile | None = None) -> None:
        self.token = token
        self.read_token = read_token
        self.access = access
        # denials since start by (operation, resource type): bounded (Operation x topic,
        # group, cluster), exported as msgstore_access_denied_total
        self._denials: Counter[tuple[str, str]] = Counter()
        self._denials_lock = threading.Lock()

    @property
    def required(self) -> bool:
        """Whether a credential is required at all (a node with no token requires none)."""
        return bool(self.token)

    def document(self) -> AccessDocument:
        return self.access.current() if self.access is not None else AccessDocument()

    def authenticate(self, token: str) -> Principal | None:
        """The principal a bearer token (or SASL password) proves, or None."""
        if not self.required:
            return ANONYMOUS
        if hmac.compare_digest(token.encode(), self.token.encode()):
            return SUPER_USER
        if self.read_token and hmac.compare_digest(token.encode(), self.read_token.encode()):
            return READER
        user = self.document().user_by_token(token)
        return Principal(user.name, PrincipalKind.USER) if user is not None else None

    def authenticate_subject(self, subject: str) -> Principal | None:
        """The user a verified client certificate's subject (RFC 4514) names, or None."""
        user = self.document().user_by_subject(subject)
        return Principal(user.name, PrincipalKind.USER) if user is not None else None

    def allows(
        self, who: Principal, operation: Operation, resource: ResourceType, name: str
    ) -> bool:
        if who.is_super:
            return True
        if who.kind is PrincipalKind.READER:
            return operation in READER_OPERATIONS
        return self.document().allows(who.name, operation, resource, name)

    def check(
        self,
        who: Principal,
        operation: Operation,
        resource: ResourceType,
        name: str,
        source: str = "",
    ) -> None:
        """Raise ``Forbidden`` (and log the denial) unless ``who`` may do this."""
        if self.allows(who, operation, resource, name):
            return
        raise self.denial(who, operation, resource.value, name, source)

    def allows_cluster(self, who: Principal, operation: Operation) -> bool:
        """Cluster-wide actions (admin, replication, users and ACLs): the super-user's; the
        read token of the two-token mode may still read and describe (its GET routes)."""
        if who.is_super:
            return True
        return who.kind is PrincipalKind.READER and operation in READER_OPERATIONS

    def check_cluster(
        self, who: Principal, operation: Operation, what: str, source: str = ""
    ) -> None:
        """Raise ``Forbidden`` (and log the denial) unless ``who`` may do ``what``."""
        if not self.allows_cluster(who, operation):
            raise self.denial(who, operation, CLUSTER, what, source)

    def denial(
        self, who: Principal, operation: Operation, resource: str, name: str, source: str
    ) -> Forbidden:
        """Log and count one refused request; the error to raise for it."""
        self.denied(who, operation.value, resource, name, source)
        return Forbidden(
            f"{who.name} may not {operation.value} {resource} {name}",
            operation=operation.value,
            resource=resource,
            name=name,
        )

    def denied(
        self, who: Principal, operation: str, resource: str, name: str, source: str = ""
    ) -> None:
        """Log and count one refusal (``msgstore_access_denied_total{operation,resource}``):
        ``denial`` calls it, and so does a front end that answers a refusal in its own
        protocol's terms (Kafka's authorization error codes) instead of raising."""
        with self._denials_lock:
            self._denials[operation, resource] += 1
        log.warning(
            "access denied: %s may not %s %s %s",
            who.name,
            operation,
            resource,
            name,
            extra={
                "principal": who.name,
                "operation": operation,
                "resource": f"{resource}:{name}",
                "source": source,
            },
        )

    def denial_counts(self) -> dict[tuple[str, str], int]:
        """Refusals so far by (operation, resource type), for the metrics page."""
        with self._denials_lock:
            return dict(self._denials)

    def allows_any(self, who: Principal, operation: Operation, resource: ResourceType) -> bool:
        """Whether ``who`` may do ``operation`` on at least one resource of this type (some
        rule names it): Kafka's check by resource type, e.g. an idempotent producer needs
        WRITE on any topic."""
        if who.is_super:
            return True
        if who.kind is PrincipalKind.READER:
            return operation in READER_OPERATIONS
        return any(
            rule.resource is resource
            and (rule.operation is operation or operation is Operation.DESCRIBE)
            for rule in self.document().rules_of(who.name)
        )

    def still_holds_subject(self, who: Principal, subject: str) -> bool:
        """Whether a client certificate's ``subject`` still names user ``who`` (the user was
        not removed, its ``tls_subject`` not changed since the connection authenticated)."""
        user = self.document().user(who.name)
        return user is not None and user.tls_subject == subject

    def still_holds(self, who: Principal, token: str) -> bool:
        """Whether ``token`` still proves ``who`` (the user was not removed, its token not
        changed since it authenticated): a protocol that authenticates once per connection
        asks it again on every request."""
        if who.kind is not PrincipalKind.USER:
            return True  # the node's tokens are settings: they change only with a restart
        user = self.document().user(who.name)
        return (
            user is not None
            and user.token_sha256 is not None
            and hmac.compare_digest(user.token_sha256, token_digest(token))
        )

    def readable(self, who: Principal, topics: Iterable[str]) -> set[str]:
        """The topics of ``topics`` ``who`` may read: cluster-wide lookups keep only their
        messages, so a lookup never reveals a message of another topic, nor that it exists."""
        return {t for t in topics if self.allows(who, Operation.READ, ResourceType.TOPIC, t)}

    def describable(self, who: Principal, resource: ResourceType, names: Iterable[str]) -> set[str]:
        """The names of ``names`` ``who`` may describe (listings show only these)."""
        return {n for n in names if self.allows(who, Operation.DESCRIBE, resource, n)}
