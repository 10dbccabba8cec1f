"""ConfigMaps (node settings, routing table) and the generated token Secret."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from .. import naming
from .meta import Owner, object_meta


def build_config_map(owner: Owner, settings: Mapping[str, str]) -> dict[str, Any]:
    """Node settings; pods load every key as an environment variable."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(owner, naming.config_map_name(owner.name), "config"),
        "data": dict(sorted(settings.items())),
    }


def build_routing_config_map(owner: Owner, routing_text: str) -> dict[str, Any]:
    """The routing table, mounted into every pod at MSGSTORE_ROUTING_FILE (nodes reload it)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(owner, naming.routing_config_map_name(owner.name), "routing"),
        "data": {naming.ROUTING_KEY: routing_text},
    }


def build_token_secret(owner: Owner, token: str, key: str) -> dict[str, Any]:
    """API token Secret, created once when the spec names none (never rotated silently)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": object_meta(owner, naming.token_secret_name(owner.name), "auth"),
        "data": {key: base64.b64encode(token.encode()).decode()},
    }
