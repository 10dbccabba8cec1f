"""Who a token is: the one check of a client's token, shared by the HTTP API's middleware and
the Kafka listener's SASL, so both protocols grant exactly the same two roles.

A node with a token (``MSGSTORE_TOKEN``) requires it; with a read token
(``MSGSTORE_READ_TOKEN``) too, that second token may only read. Without a token the node
requires nothing (the read token alone does not turn authentication on)."""

from __future__ import annotations

import enum
import hmac


class Role(enum.Enum):
    WRITE = "write"  # the full token: everything
    READ = "read"  # the read token: reads only


def token_role(given: str, token: str, read_token: str) -> Role | None:
    """The role ``given`` grants, or None when it is neither token (constant-time compares)."""
    if token and hmac.compare_digest(given.encode(), token.encode()):
        return Role.WRITE
    if read_token and hmac.compare_digest(given.encode(), read_token.encode()):
        return Role.READ
    return None
