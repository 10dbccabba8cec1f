"""The dispatch table of the Kafka listener: which APIs and versions a node answers, and what
a handler is given (see the package docstring for how a handler module registers)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

from storage_node.kafka.acl import Guard

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler


@dataclass
class ConnectionState:
    """What the requests of one connection share besides its SASL session: the Fetch
    answer read ahead for it (kafka.fetch.ReadAhead) and the log bytes its last Fetch read
    (kafka.fetch.KeptSpans), dropped when the connection ends."""

    read_ahead: Any = None
    read_ahead_misses: int = 0  # read-aheads in a row that the next Fetch did not ask for
    read_ahead_skip: int = 0  # Fetches to answer before reading ahead again
    spans: Any = None  # the log bytes its last Fetch read (kafka.fetch.KeptSpans)

    def close(self) -> None:
        if self.spans is not None:
            self.spans.clear()
        if self.read_ahead is not None:
            self.read_ahead.cancel()
            self.read_ahead = None


@dataclass
class RequestContext:
    """One request as a handler sees it: the header's fields, the node, the answer's schema."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    node: Any  # the KafkaNode of the listener (runtime, broker identity)
    response_module: ModuleType = field(repr=False)
    client_host: str = ""  # "/ADDRESS" of the connection, as Kafka names it (DescribeGroups)
    session: Any = None  # the connection's SASL state (kafka.sasl.Session)
    connection: ConnectionState | None = None  # None: not from a listener's connection
    # the ACL checks of this request (kafka.acl): a handler asks it before it touches a
    # topic or group; the default (no principal) refuses everything
    guard: Guard = field(default_factory=lambda: Guard(None, None, -1))
    listener: str = "internal"  # or "external": which brokers' addresses the answer names

    def make(self, entity: str, /, **fields: Any) -> Any:
        """An entity of the answer's schema (of this request's version) named ``entity``, with
        the given fields the version has (the others are dropped: one call site serves
        every version)."""
        return make(getattr(self.response_module, entity), **fields)


def make(cls: type, **fields: Any) -> Any:
    """``cls(**fields)`` keeping only the fields ``cls`` declares."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


class ApiTable:
    """APIs by key; the request and response classes of every version are resolved once."""

    def __init__(self) -> None:
        self.apis: dict[int, Api] = {}
        self._request_types: dict[tuple[int, int], type] = {}
        self._response_modules: dict[tuple[int, int], ModuleType] = {}

    def add(self, api: Api) -> None:
        if api.key in self.apis:
            raise ValueError(f"API key {api.key} ({api.name}) is registered twice")
        for version in range(api.min_version, api.max_version + 1):
            req = load_payload_module(api.key, version, EntityType.request)
            resp = load_payload_module(api.key, version, EntityType.response)
            self._request_types[api.key, version] = _payload_class(req, EntityType.request)
            self._response_modules[api.key, version] = resp
        self.apis[api.key] = api

    def get(self, key: int) -> Api | None:
        return self.apis.get(key)

    def request_type(self, key: int, version: int) -> type:
        return self._request_types[key, version]

    def response_module(self, key: int, version: int) -> ModuleType:
        return self._response_modules[key, version]


def _payload_class(module: ModuleType, kind: EntityType) -> type:
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) == kind:
            return value
    raise ValueError(f"{module.__name__} has no {kind.name} class")


def response_class(module: ModuleType) -> type:
    """The response payload class of a response schema module."""
    return _payload_class(module, EntityType.response)
