"""Validation of names that become file or folder names (topics, groups, producers)."""

from __future__ import annotations

import re

from storage_node.errors import InvalidName

NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def check_name(kind: str, name: object) -> str:
    """Return ``name`` or raise InvalidName: no separators, no ``..``, bounded length."""
    if not isinstance(name, str) or not NAME_RE.match(name) or name in (".", ".."):
        raise InvalidName(
            f"invalid {kind} name {name!r}: use 1-200 of [A-Za-z0-9._-]", name=str(name)
        )
    return name
