"""pydantic models of the node API's JSON bodies: requests are validated with them, and the
OpenAPI document (``openapi.py``) takes its schemas from them, so the two cannot drift.

Answers on the hot paths (append results, read pages, key lookups) are still formatted by
hand in ``message_json``; the models here describe their shape for the document and the
conformance tests, and cost those paths nothing.

Over 400 lines on purpose: every JSON body of the API in one place, which is what lets
the OpenAPI document be generated from a single module; each model is a few lines.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from storage_node.errors import InvalidArgument, InvalidName
from storage_node.formats.limits import EMPTY_KEY_RULE, MAX_PARTITIONS, MAX_READ_MESSAGES
from storage_node.formats.names import NAME_PATTERN
from storage_node.formats.packed import PackedBatch, headers_column
from storage_node.wire.message_json import headers_from_json
from storage_node.wire.routing_table import check_topic_name

MAX_INT64 = 2**63 - 1

M = TypeVar("M", bound=BaseModel)


def _check_group(name: str) -> str:
    if not re.fullmatch(NAME_PATTERN, name) or name in (".", ".."):
        raise InvalidName(f"invalid consumer group name {name!r}")
    return name


# A topic name: checked by the same function as the routing table (an InvalidName, code
# invalid_name, passes through pydantic untouched); documented as the pattern it enforces.
TopicName = Annotated[
    str,
    AfterValidator(check_topic_name),
    WithJsonSchema({"type": "string", "pattern": NAME_PATTERN, "not": {"enum": [".", ".."]}}),
]
Int64 = Annotated[int, Field(ge=0, le=MAX_INT64)]
PartitionNumber = Annotated[int, Field(ge=0, le=MAX_PARTITIONS - 1)]


class Request(BaseModel):
    """A request body: strict types (no "3" for 3, no true for 1), unknown fields refused."""

    model_config = ConfigDict(strict=True, extra="forbid")


class Answer(BaseModel):
    """An answer body (documented; the routes build the JSON themselves)."""


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(exc: ValidationError) -> str:
    """A ValidationError as one line naming each bad field (at most three)."""
    parts = []
    for err in exc.errors(include_url=False)[:3]:
        where = _where(err["loc"])
        if not err["loc"] and err["type"] in ("model_type", "dict_type"):
            parts.append("the body must be a JSON object")
        elif err["type"] == "extra_forbidden":
            parts.append(f"unknown field {where!r}")
        elif err["type"] == "missing":
            parts.append(f"missing field {where!r}")
        else:
            message = err["msg"].removeprefix("Value error, ")
            parts.append(f"{where}: {message}" if where else message)
    more = len(exc.errors()) - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def parse(model: type[M], doc: Any, error: type[InvalidArgument] = InvalidArgument) -> M:
    """Validate a decoded JSON body against ``model``; a clear 400 (``error``) when it fails."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        details: dict[str, object] = {}
        first = exc.errors(include_url=False)
        if first and first[0]["loc"][:1] == ("messages",) and len(first[0]["loc"]) > 1:
            index = first[0]["loc"][1]
            if isinstance(index, int):
                details["index"] = index
        raise error(describe(exc), **details) from None


# -- errors -------------------------------------------------------------------------------
class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str
    message: str
    owner: str | None = None
    owner_id: str | None = None
    unreachable_nodes: list[str] | None = Field(
        default=None,
        description="(code incomplete) the nodes a cluster-wide lookup could not ask",
    )


class Error(Answer):
    """Every failure: ``{"error": {"code", "message", ...}}``; code names the problem."""

    error: ErrorDetail


# -- topics -------------------------------------------------------------------------------
class TopicSpec(Request):
    name: TopicName
    partitions: int = Field(ge=1, le=MAX_PARTITIONS)
    compression: Literal["none", "lz4"] = "lz4"
    retention_hours: float = Field(default=168.0, gt=0, le=1_000_000)

    @field_validator("retention_hours", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a number")
        return float(value) if isinstance(value, int) else value


class RoutedTopic(Answer):
    """A topic as the routing table holds it."""

    partitions: int
    owners: list[str]
    compression: str | None = None
    retention_hours: float | None = None


class TopicPartitions(Request):
    """The topic's new partition count: only up; the same count changes nothing."""

    partitions: int = Field(ge=1, le=MAX_PARTITIONS)


# -- messages -----------------------------------------------------------------------------
class MessageIn(Request):
    """One message of a JSON batch: exactly one of value (UTF-8 text) and value_base64."""

    value: str | None = None
    value_base64: Annotated[str, WithJsonSchema({"type": "string", "format": "byte"})] | None = None
    key: str | None = Field(default=None, min_length=1, description=EMPTY_KEY_RULE)
    tag: str | None = None
    msg_id: str | None = Field(default=None, description="app-iphex-hour-seq; assigned when absent")
    timestamp: Int64 | None = Field(default=None, description="born time, ms since epoch")
    partition: Annotated[int, Field(ge=0)] | None = None
    headers: list[list[str | None]] | None = None  # [name, value] pairs, values text or null
    headers_base64: list[list[str | None]] | None = None  # the same, values base64 or null

    @field_validator("key", mode="before")
    @classmethod
    def _key(cls, key: object) -> object:
        if key == "":
            raise ValueError(EMPTY_KEY_RULE)  # formats/limits.py: the rule of every way in
        return key

    @field_validator("value")
    @classmethod
    def _utf8(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("is not encodable as UTF-8") from None
        return value

    @field_validator("value_base64")
    @classmethod
    def _base64(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("is not valid base64") from None
        return value

    @model_validator(mode="after")
    def _one_value(self) -> MessageIn:
        if (self.value is None) == (self.value_base64 is None):
            raise ValueError("needs exactly one of 'value' and 'value_base64'")
        headers_from_json(self.model_dump())  # malformed headers: ValueError
        return self

    def value_bytes(self) -> bytes:
        if self.value_base64 is not None:
            return base64.b64decode(self.value_base64)
        assert self.value is not None
        return self.value.encode("utf-8")


class Batch(Request):
    messages: list[MessageIn] = Field(min_length=1)
    producer_id: str | None = Field(default=None, min_length=1)
    sequence: Int64 | None = None

    @model_validator(mode="after")
    def _together(self) -> Batch:
        if (self.producer_id is None) != (self.sequence is None):
            raise ValueError("'producer_id' and 'sequence' go together")
        return self

    def packed(self) -> PackedBatch:
        """The batch as the store's packed columns."""
        items = self.messages
        batch = PackedBatch.from_lists(
            [x.value_bytes() for x in items],
            [x.key for x in items],
            [x.tag for x in items],
            [x.msg_id for x in items],
            [x.timestamp for x in items],
            partitions=[x.partition for x in items],
        )
        batch.headers = headers_column([headers_from_json(x.model_dump()) for x in items])
        return batch


class BatchEnvelope(Request):
    """The batch around its messages, checked before the column-wise message checks of
    ``message_json`` (which build no object per message on the hot path)."""

    messages: list[Any] = Field(min_length=1)
    producer_id: str | None = Field(default=None, min_length=1)
    sequence: Int64 | None = None

    @model_validator(mode="after")
    def _together(self) -> BatchEnvelope:
        if (self.producer_id is None) != (self.sequence is None):
            raise ValueError("'producer_id' and 'sequence' go together")
        return self


class AppendResult(Answer):
    partition: int
    offset: int
    msg_id: str


class AppendResults(Answer):
    results: list[AppendResult]


class BinaryAppendResults(Answer):
    """The answer to a binary batch: one column per field."""

    count: int
    partitions: list[int]
    offsets: list[int]
    msg_ids: list[str]


class Message(Answer):
    """A stored message: ``value`` when its bytes are UTF-8 text, else ``value_base64``."""

    topic: str
    partition: int
    offset: int
    key: str | None = None
    tag: str | None = None
    msg_id: str
    timestamp: int
    store_timestamp: int
    value: str | None = None
    value_base64: str | None = None


class ReadResult(Answer):
    messages: list[Message]
    next_offset: int
    end_reached: bool | None = None


class LookupResult(Answer):
    messages: list[Message]
    limit_reached: bool
    unreachable_nodes: list[str] | None = None


class FetchPosition(Request):
    partition: PartitionNumber
    offset: Int64 | None = Field(default=None, description="default: the first kept")


class FetchRequest(Request):
    """Pages of several partitions in one request (Kafka's fetch); limits are per partition."""

    partitions: list[FetchPosition] = Field(min_length=1, max_length=MAX_PARTITIONS)
    max_messages: int = Field(default=100, ge=1, le=MAX_READ_MESSAGES)
    max_bytes: int = Field(default=1024 * 1024, ge=1, le=64 * 1024 * 1024)
    wait_ms: int = Field(
        default=0,
        ge=0,
        le=30_000,
        description="long poll: hold an answer with no message until a partition gets one",
    )
    tag: str | None = Field(default=None, min_length=1, description="only messages with it")


class FetchPage(Answer):
    partition: int
    messages: list[Message]
    next_offset: int


class FetchResult(Answer):
    partitions: list[FetchPage]


# -- consumer groups ------------------------------------------------------------------------
GroupName = Annotated[
    str, AfterValidator(_check_group), WithJsonSchema({"type": "string", "pattern": NAME_PATTERN})
]


class OffsetCommit(Request):
    topic: TopicName
    partition: PartitionNumber
    offset: Int64


class OffsetCommitted(Answer):
    group: str
    topic: str
    partition: int
    offset: int


class OffsetsDeleted(Answer):
    group: str
    deleted: bool  # whether the group had any of these offsets
    unreachable_nodes: list[str]


class CommittedOffsets(Answer):
    group: str
    offsets: dict[str, dict[str, int]] = Field(
        description="topic -> partition (as a string) -> next offset to consume"
    )
    unreachable_nodes: list[str] | None = None


class GroupList(Answer):
    groups: list[str]
    unreachable_nodes: list[str]


# -- cluster and admin ----------------------------------------------------------------------
class RoutingNode(Answer):
    id: str
    address: str
    external_address: str | None = None


class DeletedTopic(Answer):
    generation: int
    pending: list[str]


class Routing(Answer):
    """The routing table, format in docs/ROUTING.md."""

    format: Literal[1]
    generation: int
    managed_by: Literal["local", "operator", "standalone"]
    nodes: list[RoutingNode]
    topics: dict[str, RoutedTopic]
    deleted_topics: dict[str, DeletedTopic] | None = Field(
        default=None,
        description="deleted topics whose copies some nodes still have to delete",
    )


class RoutingOffer(BaseModel):
    """A routing document (docs/ROUTING.md) as the controller publishes it; checked by the
    routing table's own parser, so fields beyond these pass through to it."""

    model_config = ConfigDict(extra="allow")

    format: Literal[1]
    generation: int
    managed_by: Literal["local", "operator"]
    nodes: list[RoutingNode]


class RoutingTaken(Answer):
    generation: int
    taken: bool


class FileInfo(Answer):
    kind: Literal["segment", "key_index"]
    state: Literal["unsealed", "sealed", "compacted", "uploaded"]
    name: str
    size: int
    stored_size: int
    begin_ms: int | None = None
    end_ms: int | None = None


class FileList(Answer):
    node: str
    address: str | None = None
    files: list[FileInfo]


class Drain(Request):
    draining: bool


class DrainState(Answer):
    node: str
    draining: bool


class CompactReport(Answer):
    node: str
    seconds: float | None = None
    report: dict[str, Any]


class Sealed(Answer):
    node: str
    sealed: list[FileInfo]


class Health(Answer):
    model_config = ConfigDict(extra="allow")
