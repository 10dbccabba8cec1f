"""The name rule: what a topic, consumer group, producer, message-ID app or file name may be.

Such names become file and folder names on a node and path segments in URLs, so one rule
serves the store, the HTTP API, its OpenAPI schema, the client-side tools and the Spark
options: 1 to 200 of ``[A-Za-z0-9._-]``, and not ``.`` or ``..`` (no separators, no way out
of a data directory).
"""

from __future__ import annotations

import re
from typing import TypeGuard

from storage_node.errors import InvalidName

MAX_NAME_LENGTH = 200
NAME_PATTERN = rf"^[A-Za-z0-9._-]{{1,{MAX_NAME_LENGTH}}}$"
NAME_RE = re.compile(NAME_PATTERN)
NAME_RULE = f"1-{MAX_NAME_LENGTH} of [A-Za-z0-9._-], not '.' or '..'"


def is_valid_name(name: object) -> TypeGuard[str]:
    """True when ``name`` follows the name rule."""
    return isinstance(name, str) and bool(NAME_RE.match(name)) and name not in (".", "..")


def check_name(kind: str, name: object) -> str:
    """Return ``name`` or raise InvalidName: no separators, no ``..``, bounded length."""
    if not is_valid_name(name):
        raise InvalidName(
            f"invalid {kind} name {name!r}: use 1-200 of [A-Za-z0-9._-]", name=str(name)
        )
    return name
