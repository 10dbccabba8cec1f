"""Node settings from defaults, a config file, MSGSTORE_* environment variables and flags.

Later sources win: defaults < config file < environment < command-line flags. Store settings
(the fields of StoreConfig) travel the same way, so a pod is configured by env vars alone
(every name is listed in docs/CONFIG.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from storage_node.errors import InvalidArgument

ENV_PREFIX = "MSGSTORE_"


@dataclass
class NodeSettings:
    """Everything the node server itself needs (the store's own knobs are in ``store``)."""

    data_dir: str = ""
    host: str = "127.0.0.1"
    port: int = 7100
    node_id: str = "node-0"
    advertise_address: str = ""
    token: str = ""
    read_token: str = ""
    routing_file: str = ""
    routing_poll_s: float = 1.0
    max_body_bytes: int = 64 * 1024 * 1024
    max_batch_messages: int = 100_000
    min_free_bytes: int = 64 * 1024 * 1024
    read_threads: int = 4
    peer_timeout_s: float = 5.0
    # replicated logs: how long a sync append waits for its in-sync copies before a 503
    replication_ack_timeout_s: float = 5.0
    # HTTPS: serve with this certificate and key (PEM files, reloaded when they change);
    # tls_ca is the CA bundle used to verify other nodes (the system's when empty).
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    tls_reload_s: float = 5.0
    log_level: str = "INFO"
    store: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """The base URL others use to reach this node."""
        scheme = "https" if self.tls_cert else "http"
        return (self.advertise_address or f"{scheme}://{self.host}:{self.port}").rstrip("/")


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _convert(name: str, raw: Any, kind: Any) -> Any:
    """Turn a config value (often a string from the environment) into the field's type."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if raw is None or (isinstance(raw, str) and raw.lower() in ("", "none", "null")):
            return None
        kind = args[0]
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind is int:
            if isinstance(raw, bool):
                raise ValueError(raw)
            return int(str(raw).replace("_", ""))
        if kind is float:
            return float(raw)
        if kind is str:
            return str(raw)
    except ValueError:
        raise InvalidArgument(f"setting {name}: cannot read {raw!r} as {kind.__name__}") from None
    return raw


def load_config_file(path: str) -> dict[str, Any]:
    """Read a flat JSON or YAML mapping of setting names to values."""
    text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidArgument(f"config file {path} must hold a mapping of settings")
    return {str(k).lower().replace("-", "_"): v for k, v in data.items()}


def store_field_types() -> dict[str, Any]:
    from storage_node.store import StoreConfig

    return _field_types(StoreConfig)


def resolve_settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | None = None,
) -> NodeSettings:
    """Merge every source; unknown names in a config file are an error (typos must not pass)."""
    env = os.environ if env is None else env
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    config_path = config_file or flags.get("config") or env.get(ENV_PREFIX + "CONFIG")
    from_file = load_config_file(config_path) if config_path else {}
    node_types = {k: v for k, v in _field_types(NodeSettings).items() if k != "store"}
    store_types = store_field_types()
    unknown = set(from_file) - set(node_types) - set(store_types)
    if unknown:
        raise InvalidArgument(f"unknown settings in {config_path}: {', '.join(sorted(unknown))}")
    unknown_flags = set(flags) - set(node_types) - set(store_types) - {"config"}
    if unknown_flags:
        raise InvalidArgument(f"unknown settings: {', '.join(sorted(unknown_flags))}")
    values: dict[str, Any] = {}
    store_values: dict[str, Any] = {}
    for name, kind in list(node_types.items()) + list(store_types.items()):
        target = store_values if name in store_types and name not in node_types else values
        raw: Any = dataclasses.MISSING
        if name in from_file:
            raw = from_file[name]
        env_name = ENV_PREFIX + name.upper()
        if env_name in env:
            raw = env[env_name]
        if name in flags:
            raw = flags[name]
        if raw is not dataclasses.MISSING:
            target[name] = _convert(name, raw, kind)
    settings = NodeSettings(**values)
    store_values["data_dir"] = settings.data_dir
    settings.store = store_values
    if not settings.data_dir:
        raise InvalidArgument("a data directory is required (--data-dir or MSGSTORE_DATA_DIR)")
    if not 0 <= settings.port <= 65535:
        raise InvalidArgument(f"port {settings.port} is out of range")
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise InvalidArgument("TLS needs both a certificate and a key (--tls-cert and --tls-key)")
    for what, path in (("certificate", settings.tls_cert), ("key", settings.tls_key)):
        if path and not os.path.isfile(path):
            raise InvalidArgument(f"TLS {what} file {path} does not exist")
    if settings.tls_cert and settings.advertise_address.startswith("http://"):
        raise InvalidArgument(
            f"the node serves HTTPS but advertises {settings.advertise_address}; "
            "advertise an https:// address"
        )
    if settings.tls_reload_s <= 0:
        raise InvalidArgument("tls_reload_s must be positive")
    return settings


def build_store_config(settings: NodeSettings) -> Any:
    from storage_node.store import StoreConfig

    return StoreConfig(**settings.store).validate()
