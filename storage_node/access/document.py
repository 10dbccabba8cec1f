"""The access document: every user, how each proves who it is, and the ACL rules.

One JSON document holds the whole model, so a node swaps it in one step and never sees a
user without its rules. Layout (``version`` 1)::

    {"version": 1,
     "generation": 7,                       # grows with every change; a node never
                                            # replaces a document by an older one
     "users": [
       {"name": "orders-app",
        "token_sha256": "9f86d0...",        # hex SHA-256 of the user's token, or null
        "tls_subject": "CN=orders-app"}     # RFC 4514 subject of its client certificate,
                                            # or null; at least one of the two is set
     ],
     "acls": [
       {"user": "orders-app", "operation": "write",
        "resource": "topic", "pattern": "prefix", "name": "orders-"}
     ]}

Tokens are random (``new_token``: 32 bytes from ``secrets``), so one SHA-256 is enough to
keep a stolen document from revealing them; a slow password hash would only add cost to
every request. Rules only allow: what no rule allows is denied. The node's own token
(``MSGSTORE_TOKEN``) stays the super-user, outside the document.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field, replace
from typing import Any

from storage_node.errors import InvalidArgument, NotFound

VERSION = 1
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RESOURCE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's topic-name alphabet
TOKEN_BYTES = 32


class Operation(enum.StrEnum):
    READ = "read"  # consume, fetch, look up, commit a group's offsets (with group read)
    WRITE = "write"  # produce
    CREATE = "create"  # create topics, add partitions
    DELETE = "delete"  # delete topics, reset/delete groups
    DESCRIBE = "describe"  # see that a topic or group exists and its offsets
    ALTER = "alter"  # change a topic's configuration


class ResourceType(enum.StrEnum):
    TOPIC = "topic"
    GROUP = "group"


class Pattern(enum.StrEnum):
    LITERAL = "literal"
    PREFIX = "prefix"


@dataclass(frozen=True)
class User:
    name: str
    token_sha256: str | None = None
    tls_subject: str | None = None


@dataclass(frozen=True)
class AclRule:
    user: str
    operation: Operation
    resource: ResourceType
    pattern: Pattern
    name: str

    def matches(self, resource: ResourceType, name: str) -> bool:
        if resource is not self.resource:
            return False
        if self.pattern is Pattern.LITERAL:
            return name == self.name
        return name.startswith(self.name)


@dataclass(frozen=True)
class AccessDocument:
    generation: int = 0
    users: tuple[User, ...] = ()
    acls: tuple[AclRule, ...] = ()
    _by_name: dict[str, User] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({u.name: u for u in self.users})

    def user(self, name: str) -> User | None:
        return self._by_name.get(name)

    def user_by_token(self, token: str) -> User | None:
        """The user whose token this is (compares digests in constant time)."""
        digest = token_digest(token)
        found = None
        for user in self.users:
            if user.token_sha256 and hmac.compare_digest(user.token_sha256, digest):
                found = user
        return found

    def user_by_subject(self, subject: str) -> User | None:
        return next((u for u in self.users if u.tls_subject == subject), None)

    def rules_of(self, user: str) -> tuple[AclRule, ...]:
        return tuple(r for r in self.acls if r.user == user)

    def allows(self, user: str, operation: Operation, resource: ResourceType, name: str) -> bool:
        """True when a rule of ``user`` allows ``operation`` on the named resource.

        Reading, writing, creating, deleting or altering a resource also lets one describe
        it (Kafka's implied DESCRIBE), so a producer can fetch a topic's metadata."""
        for rule in self.acls:
            if rule.user != user or not rule.matches(resource, name):
                continue
            if rule.operation is operation or operation is Operation.DESCRIBE:
                return True
        return False

    # -- edits (the user admin API and the CLI): each returns a new document, same generation
    def with_user(self, user: User) -> AccessDocument:
        if self.user(user.name) is not None:
            raise InvalidArgument(f"user {user.name} exists already; delete it first")
        doc = replace(self, users=(*self.users, user))
        return parse_access(doc.to_json())  # the whole document's rules (unique tokens...)

    def without_user(self, name: str) -> AccessDocument:
        """The document without the user and every rule of it (a revoked user keeps no
        rule that a later user of the same name would inherit)."""
        if self.user(name) is None:
            raise NotFound(f"no user {name!r}")
        return replace(
            self,
            users=tuple(u for u in self.users if u.name != name),
            acls=tuple(r for r in self.acls if r.user != name),
        )

    def with_rule(self, rule: AclRule) -> AccessDocument:
        """The document with ``rule`` (unchanged when it holds it already)."""
        if self.user(rule.user) is None:
            raise NotFound(f"no user {rule.user!r}: create it before giving it rules")
        if rule in self.acls:
            return self
        return replace(self, acls=(*self.acls, rule))

    def without_rule(self, rule: AclRule) -> AccessDocument:
        if rule not in self.acls:
            raise NotFound(f"no such ACL rule: {rule_text(rule)}")
        return replace(self, acls=tuple(r for r in self.acls if r != rule))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "generation": self.generation,
            "users": [
                {"name": u.name, "token_sha256": u.token_sha256, "tls_subject": u.tls_subject}
                for u in self.users
            ],
            "acls": [
                {
                    "user": r.user,
                    "operation": r.operation.value,
                    "resource": r.resource.value,
                    "pattern": r.pattern.value,
                    "name": r.name,
                }
                for r in self.acls
            ],
        }


def rule_text(rule: AclRule) -> str:
    """One line for logs and messages: ``orders-app may write topic prefix orders-``."""
    return (
        f"{rule.user} may {rule.operation.value} {rule.resource.value} "
        f"{rule.pattern.value} {rule.name}"
    )


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def parse_user(raw: Any) -> User:
    if not isinstance(raw, dict):
        raise InvalidArgument("a user must be an object")
    unknown = set(raw) - {"name", "token_sha256", "tls_subject"}
    if unknown:
        raise InvalidArgument(f"unknown user field(s): {', '.join(sorted(unknown))}")
    name = raw.get("name")
    if not isinstance(name, str) or not USER_NAME.match(name):
        raise InvalidArgument(
            f"user name {name!r} must be 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    digest = raw.get("token_sha256")
    if digest is not None and (
        not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest)
    ):
        raise InvalidArgument(f"user {name}: token_sha256 must be 64 lower-case hex digits")
    subject = raw.get("tls_subject")
    if subject is not None and (not isinstance(subject, str) or not subject.strip()):
        raise InvalidArgument(f"user {name}: tls_subject must be a non-empty string")
    if digest is None and subject is None:
        raise InvalidArgument(f"user {name} has neither a token nor a certificate subject")
    return User(name=name, token_sha256=digest, tls_subject=subject)


def parse_rule(raw: Any) -> AclRule:
    if not isinstance(raw, dict):
        raise InvalidArgument("an ACL rule must be an object")
    unknown = set(raw) - {"user", "operation", "resource", "pattern", "name"}
    if unknown:
        raise InvalidArgument(f"unknown ACL field(s): {', '.join(sorted(unknown))}")
    user = raw.get("user")
    if not isinstance(user, str) or not USER_NAME.match(user):
        raise InvalidArgument(f"ACL rule names no valid user: {user!r}")
    try:
        operation = Operation(str(raw.get("operation")))
        resource = ResourceType(str(raw.get("resource")))
        pattern = Pattern(str(raw.get("pattern", Pattern.LITERAL.value)))
    except ValueError as exc:
        raise InvalidArgument(
            f"ACL rule of {user}: {exc} (operations: {', '.join(o.value for o in Operation)};"
            f" resources: topic, group; patterns: literal, prefix)"
        ) from None
    name = raw.get("name")
    if not isinstance(name, str) or not RESOURCE_NAME.match(name):
        raise InvalidArgument(
            f"ACL rule of {user}: resource name {name!r} must be 1-249 letters, digits, "
            "'.', '_' or '-'"
        )
    return AclRule(user=user, operation=operation, resource=resource, pattern=pattern, name=name)


def parse_access(raw: Any) -> AccessDocument:
    """Validate a whole document; any fault rejects all of it (never half a model)."""
    if not isinstance(raw, dict):
        raise InvalidArgument("the access document must be a JSON object")
    if raw.get("version") != VERSION:
        raise InvalidArgument(f"unsupported access document version {raw.get('version')!r}")
    generation = raw.get("generation", 0)
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise InvalidArgument("generation must be a non-negative integer")
    users_raw = raw.get("users", [])
    acls_raw = raw.get("acls", [])
    if not isinstance(users_raw, list) or not isinstance(acls_raw, list):
        raise InvalidArgument("users and acls must be lists")
    users = tuple(parse_user(u) for u in users_raw)
    names = [u.name for u in users]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidArgument(f"user(s) listed twice: {', '.join(dupes)}")
    digests = [u.token_sha256 for u in users if u.token_sha256]
    if len(digests) != len(set(digests)):
        raise InvalidArgument("two users share one token")
    subjects = [u.tls_subject for u in users if u.tls_subject]
    if len(subjects) != len(set(subjects)):
        raise InvalidArgument("two users share one certificate subject")
    acls = tuple(parse_rule(r) for r in acls_raw)
    orphans = sorted({r.user for r in acls} - set(names))
    if orphans:
        raise InvalidArgument(f"ACL rules name unknown user(s): {', '.join(orphans)}")
    return AccessDocument(generation=generation, users=users, acls=acls)
