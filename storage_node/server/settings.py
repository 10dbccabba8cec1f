"""Node settings from defaults, a config file, MSGSTORE_* environment variables and flags.

Later sources win: defaults < config file < environment < command-line flags. Store settings
(the fields of StoreConfig) travel the same way, so a pod is configured by env vars alone
(every name is listed in docs/CONFIG.md). pydantic-settings reads and converts them, with a
flat model generated from the NodeSettings and StoreConfig dataclasses.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from storage_node.errors import InvalidArgument
from storage_node.structured_log import check_format

if typing.TYPE_CHECKING:
    from storage_node.store import StoreConfig

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
    # users and ACL rules (storage_node/access): the file is re-read when it changes; empty:
    # the two-token mode (only token and read_token exist)
    access_file: str = ""
    # the access file is written by the operator from MessageStoreUser resources: the user
    # admin API answers 409 (access_managed) instead of editing it
    access_managed: bool = False
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
    # mTLS between nodes (docs/SECURITY.md): the routes only peers call (log shipping,
    # fencing, routing-table hand-over) also need a client certificate of a node or the
    # controller issued by a CA of tls_ca; peer calls present tls_cert. None: on when the
    # node serves TLS with a CA bundle.
    peer_mtls: bool | None = None
    log_level: str = "INFO"
    # the Kafka listener (storage_node/kafka, docs/KAFKA.md): off while kafka_port is 0;
    # kafka_advertise is the host:port Kafka clients are told to use (host:kafka_port if empty)
    kafka_port: int = 0
    kafka_advertise: str = ""
    # a second Kafka listener for clients outside the cluster (a Kubernetes NodePort): off
    # while 0; it advertises kafka_external_advertise, else the routing table's
    # kafka_external_address of each node (docs/KAFKA.md, "Kubernetes")
    kafka_external_port: int = 0
    kafka_external_advertise: str = ""
    log_format: str = "json"  # one JSON object per line; "text" for people
    store: dict[str, Any] = field(default_factory=dict)

    @property
    def mtls(self) -> bool:
        """Whether the peer-only routes require a peer's client certificate."""
        if self.peer_mtls is None:
            return bool(self.tls_cert and self.tls_ca)
        return self.peer_mtls

    @property
    def address(self) -> str:
        """The base URL others use to reach this node."""
        scheme = "https" if self.tls_cert else "http"
        return (self.advertise_address or f"{scheme}://{self.host}:{self.port}").rstrip("/")


class _MappingEnv(EnvSettingsSource):
    """The environment source reading a given mapping instead of the process environment."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given = env
        super().__init__(settings_cls, env_prefix=ENV_PREFIX)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {name.lower(): value for name, value in self._given.items()}


class _Sources(BaseSettings):
    """Base of the generated settings model: every source is given explicitly."""

    model_config = SettingsConfigDict(extra="forbid", validate_default=False)

    @pydantic.model_validator(mode="before")
    @classmethod
    def _none_words(cls, data: Any) -> Any:
        """An optional setting given as "", "none" or "null" (as text) is unset."""
        if isinstance(data, dict):
            for name, info in cls.model_fields.items():
                value = data.get(name)
                if (
                    isinstance(value, str)
                    and value.strip().lower() in ("", "none", "null")
                    and type(None) in typing.get_args(info.annotation)
                ):
                    data[name] = None
        return data


def _fields(cls: type, skip: set[str]) -> dict[str, Any]:
    """A dataclass's fields as pydantic field definitions (type, default)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = ...  # no default: pydantic's marker for a required field
        out[f.name] = (hints[f.name], default)
    return out


@functools.cache
def settings_model() -> type[_Sources]:
    """One flat settings model over the node's fields and the store's (one MSGSTORE_* name
    each), generated from the two dataclasses so a new field needs no second declaration."""
    from storage_node.store import StoreConfig

    node = _fields(NodeSettings, {"store"})
    store = _fields(StoreConfig, set(node))
    return pydantic.create_model("MsgstoreSettings", __base__=_Sources, **node, **store)


def load_config_file(path: str) -> dict[str, Any]:
    """Read a flat JSON or YAML mapping of setting names to values."""
    text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidArgument(f"config file {path} must hold a mapping of settings")
    return {str(k).lower().replace("-", "_"): v for k, v in data.items()}


def _read(
    flags: Mapping[str, Any], env: Mapping[str, str], from_file: Mapping[str, Any]
) -> dict[str, Any]:
    """Every setting with its source precedence applied, converted to the field types."""
    model = settings_model()

    class Resolved(model):  # type: ignore[valid-type,misc]  # the base is generated at run time
        @classmethod
        def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], *_: Any, **__: Any
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (
                InitSettingsSource(settings_cls, dict(flags)),
                _MappingEnv(settings_cls, env),
                InitSettingsSource(settings_cls, dict(from_file)),
            )

    try:
        return Resolved().model_dump()
    except pydantic.ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        name = ".".join(str(part) for part in err["loc"])
        raise InvalidArgument(
            f"setting {name}: cannot read {err.get('input')!r}: {err['msg']}"
        ) from None


def resolve_settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | None = None,
) -> NodeSettings:
    """Merge every source; unknown names in a config file are an error (typos must not pass)."""
    env = os.environ if env is None else env
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    config_path = config_file or flags.pop("config", None) or env.get(ENV_PREFIX + "CONFIG")
    from_file = load_config_file(config_path) if config_path else {}
    known = set(settings_model().model_fields)
    unknown = set(from_file) - known
    if unknown:
        raise InvalidArgument(f"unknown settings in {config_path}: {', '.join(sorted(unknown))}")
    unknown_flags = set(flags) - known
    if unknown_flags:
        raise InvalidArgument(f"unknown settings: {', '.join(sorted(unknown_flags))}")
    values = _read(flags, env, from_file)
    node_names = {f.name for f in dataclasses.fields(NodeSettings)}
    settings = NodeSettings(**{k: v for k, v in values.items() if k in node_names})
    settings.store = {k: v for k, v in values.items() if k not in node_names}
    settings.store["data_dir"] = settings.data_dir
    if not settings.data_dir:
        raise InvalidArgument("a data directory is required (--data-dir or MSGSTORE_DATA_DIR)")
    if not 0 <= settings.port <= 65535:
        raise InvalidArgument(f"port {settings.port} is out of range")
    if not 0 <= settings.kafka_port <= 65535:
        raise InvalidArgument(f"Kafka port {settings.kafka_port} is out of range")
    if settings.kafka_advertise and not _host_port(settings.kafka_advertise):
        raise InvalidArgument(f"kafka_advertise {settings.kafka_advertise!r} must be host:port")
    if not 0 <= settings.kafka_external_port <= 65535:
        raise InvalidArgument(f"Kafka external port {settings.kafka_external_port} is out of range")
    if settings.kafka_external_port and not settings.kafka_port:
        raise InvalidArgument("a Kafka external port needs the Kafka listener (a Kafka port)")
    if settings.kafka_external_port and settings.kafka_external_port == settings.kafka_port:
        raise InvalidArgument("the Kafka external port must differ from the Kafka port")
    if settings.kafka_external_advertise and not _host_port(settings.kafka_external_advertise):
        raise InvalidArgument(
            f"kafka_external_advertise {settings.kafka_external_advertise!r} must be host:port"
        )
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
    if settings.peer_mtls and not (settings.tls_cert and settings.tls_ca):
        raise InvalidArgument(
            "peer_mtls needs the node's certificate and the CA bundle (--tls-cert, --tls-key, "
            "MSGSTORE_TLS_CA)"
        )
    if settings.mtls and not os.path.isfile(settings.tls_ca):
        raise InvalidArgument(f"TLS CA file {settings.tls_ca} does not exist")
    if settings.tls_reload_s <= 0:
        raise InvalidArgument("tls_reload_s must be positive")
    try:
        settings.log_format = check_format(settings.log_format)
    except ValueError as exc:
        raise InvalidArgument(f"MSGSTORE_LOG_FORMAT: {exc}") from None
    return settings


def _host_port(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) <= 65535


def build_store_config(settings: NodeSettings) -> StoreConfig:
    from storage_node.store import StoreConfig

    return StoreConfig(**settings.store).validate()
