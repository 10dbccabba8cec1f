"""The route table of the node API's OpenAPI 3.1 document (built by ``openapi.py``).

Body schemas come from the pydantic models of ``api_models`` and ``api_models_topics`` (the
same models validate the requests); this module adds the route table: paths, parameters,
statuses and binary content types. A new route is a model (with a JSON body) plus one
``Route`` in ``ROUTES``; tests/integration/node/test_api.py checks that the table and the
served routes agree, and the fuzz tests there drive the server from the document.
Over 400 lines on purpose: the route table, one short entry per route of the API; a
route's documentation is found by searching one file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from storage_node.formats.limits import MAX_LOOKUP, MAX_READ_MESSAGES
from storage_node.formats.names import NAME_PATTERN
from storage_node.server import api_models as m
from storage_node.server import api_models_topics as t
from storage_node.server.api_models import MAX_INT64, MAX_PARTITIONS
from storage_node.server.routes_messages import MAX_READ_BYTES, MAX_WAIT_MS
from storage_node.wire.batch_codec import CONTENT_TYPE as BATCH_CONTENT_TYPE

OCTETS = "application/octet-stream"
BINARY = {"type": "string", "format": "binary"}
INT64 = {"type": "integer", "minimum": 0, "maximum": MAX_INT64}

ERRORS = {
    "400": "malformed input (code names the problem); nothing changed",
    "401": "missing or invalid bearer token",
    "403": "the principal may not do this (its ACL rules, or the read token changing something)",
    "404": "unknown topic, message or file",
    "409": "a topic exists with another configuration, a message ID is already taken, "
    "the operator manages the cluster's topics, or MessageStoreUser resources manage the users",
    "413": "body or message larger than the limit",
    "415": "unsupported body content type",
    "421": "another node owns the partition; 'owner' holds its address",
    "503": "the node is recovering, draining or a peer cannot answer; code incomplete: a "
    "cluster-wide lookup found nothing on the nodes that answered, unreachable_nodes did not",
    "507": "the data disk is full",
}
AUTH = ("401",)
WRITE_AUTH = ("401", "403")


@dataclass(frozen=True)
class Param:
    """A path, query or header parameter (path parameters are always required)."""

    name: str
    where: str
    schema: dict[str, Any]
    description: str
    required: bool = False

    def to_openapi(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "in": self.where,
            "required": self.required or self.where == "path",
            "description": self.description,
            "schema": dict(self.schema),
        }


@dataclass(frozen=True)
class Reply:
    """One documented answer: a JSON model (or inline schema) and/or other content types."""

    description: str
    model: type[BaseModel] | tuple[type[BaseModel], ...] | None = None
    schema: dict[str, Any] | None = None
    other: tuple[str, ...] = ()

    def to_openapi(self) -> dict[str, Any]:
        content: dict[str, Any] = {}
        if self.model is not None:
            models = self.model if isinstance(self.model, tuple) else (self.model,)
            refs = [_ref(x) for x in models]
            content["application/json"] = {"schema": refs[0] if len(refs) == 1 else {"oneOf": refs}}
        elif self.schema is not None:
            content["application/json"] = {"schema": self.schema}
        for content_type in self.other:
            schema = {"type": "string"} if content_type.startswith("text/") else BINARY
            content[content_type] = {"schema": schema}
        return {"description": self.description, "content": content}


@dataclass(frozen=True)
class Route:
    """One operation: what it takes and every status it may answer."""

    method: str
    path: str
    summary: str
    replies: dict[str, Reply]
    errors: tuple[str, ...] = ()
    params: tuple[Param, ...] = ()
    body: type[BaseModel] | None = None
    body_types: tuple[str, ...] = ()  # non-JSON request content types (binary bodies)
    description: str | None = None
    public: bool = False  # open without a token

    def to_openapi(self) -> dict[str, Any]:
        op: dict[str, Any] = {"summary": self.summary}
        if self.description:
            op["description"] = self.description
        if self.public:
            op["security"] = []
        if self.params:
            op["parameters"] = [p.to_openapi() for p in self.params]
        if self.body is not None or self.body_types:
            content: dict[str, Any] = {}
            if self.body is not None:
                content["application/json"] = {"schema": _ref(self.body)}
            for content_type in self.body_types:
                content[content_type] = {"schema": BINARY}
            op["requestBody"] = {"required": True, "content": content}
        responses = {status: reply.to_openapi() for status, reply in self.replies.items()}
        denied = () if self.public or "403" in self.errors else ("403",)  # ACL rules
        for code in (*self.errors, *denied):
            responses[code] = Reply(ERRORS[code], m.Error).to_openapi()
        op["responses"] = responses
        return op


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _columns(description: str, model: type[BaseModel]) -> Reply:
    """A read answer: JSON by default, the binary read framing when Accept asks for it."""
    return Reply(
        f"{description}. With 'Accept: {BATCH_CONTENT_TYPE}' the same answer comes as "
        "columns in the read framing of docs/BATCH_FORMAT.md",
        model,
        other=(BATCH_CONTENT_TYPE,),
    )


def _name(name: str, where: str, description: str) -> Param:
    return Param(name, where, {"type": "string", "pattern": NAME_PATTERN}, description)


def _bounded(name: str, low: int, high: int, description: str) -> Param:
    return Param(name, "query", {"type": "integer", "minimum": low, "maximum": high}, description)


TOPIC = Param(
    "topic",
    "path",
    {"type": "string", "pattern": NAME_PATTERN, "not": {"enum": [".", ".."]}},
    "topic name",
)
GROUP = _name("group", "path", "consumer group")
PARTITION = Param(
    "partition",
    "path",
    {"type": "integer", "minimum": 0, "maximum": MAX_PARTITIONS - 1},
    "partition",
)
SCOPE = Param(
    "scope",
    "query",
    {"type": "string", "enum": ["cluster", "local"]},
    "cluster (default): merge the answers of every node; local: this node only",
)
ONE_PARTITION = _bounded("partition", 0, MAX_PARTITIONS - 1, "only this partition (with topic)")
FILE_KIND = Param("kind", "path", {"type": "string", "enum": ["segment", "key_index"]}, "file kind")
FILE_NAME = _name("name", "path", "file name")
LOG = _name("log", "query", "a replicated log this node leads (default: see ENGINE_API.md)")
ANY_OBJECT = {"type": "object"}

ROUTES: tuple[Route, ...] = (
    Route(
        "get",
        "/healthz",
        "liveness: the process serves HTTP",
        {"200": Reply("alive", m.Health)},
        public=True,
    ),
    Route(
        "get",
        "/readyz",
        "readiness: the store finished recovery and the node is not draining",
        {"200": Reply("ready", m.Health), "503": Reply("not ready", m.Health)},
        public=True,
    ),
    Route(
        "get",
        "/metrics",
        "Prometheus metrics (text exposition format)",
        {"200": Reply("metrics", other=("text/plain",))},
        public=True,
    ),
    Route(
        "get",
        "/v1/openapi.json",
        "this document",
        {"200": Reply("OpenAPI 3.1 document", schema=ANY_OBJECT)},
        AUTH,
    ),
    Route(
        "post",
        "/v1/topics",
        "create a topic (201); an identical repeat answers 200",
        {
            "201": Reply("created", t.Topic),
            "200": Reply("an identical topic already exists", t.Topic),
        },
        ("400", "409", "413", "503", "507", *WRITE_AUTH),
        body=m.TopicSpec,
    ),
    Route(
        "get", "/v1/topics", "list topics", {"200": Reply("topics", t.TopicList)}, ("503", "401")
    ),
    Route(
        "get",
        "/v1/topics/{topic}",
        "a topic with each partition's owner, first/next offsets and stored bytes",
        {"200": Reply("the topic", t.TopicDetail)},
        ("400", "404", "503", "401"),
        params=(TOPIC, SCOPE),
    ),
    Route(
        "delete",
        "/v1/topics/{topic}",
        "delete a topic on every node (scope=local: this node's copy only)",
        {"200": Reply("deleted", t.TopicDeleted)},
        ("400", "404", "409", "503", "507", *WRITE_AUTH),
        params=(TOPIC, SCOPE),
        description=(
            "The topic leaves the listings; its messages are no longer served by offset, key, "
            "message ID or time and the consumer groups' offsets for it are dropped. A topic "
            "created again under the name starts empty. The bytes are reclaimed when "
            "retention or compaction removes their segments."
        ),
    ),
    Route(
        "post",
        "/v1/topics/{topic}/partitions",
        "add partitions to a topic (scope=local: this node's copy only)",
        {"200": Reply("the topic with its new count", t.TopicGrown)},
        ("400", "404", "409", "413", "503", "507", *WRITE_AUTH),
        params=(TOPIC, SCOPE),
        body=m.TopicPartitions,
        description=(
            "New partitions start at offset 0 and existing ones keep their data; keyed "
            "messages produced afterwards map to key_hash(key) % the new count."
        ),
    ),
    Route(
        "post",
        "/v1/topics/{topic}/messages",
        "append a batch; answers once durable per the flush policy",
        {
            "200": Reply(
                "appended (results in batch order). A binary batch sent with "
                f"'Accept: {BATCH_CONTENT_TYPE}' gets the results as columns "
                "(the append answer of docs/BATCH_FORMAT.md)",
                (m.AppendResults, m.BinaryAppendResults),
                other=(BATCH_CONTENT_TYPE,),
            )
        },
        ("400", "404", "409", "413", "415", "421", "503", "507", *WRITE_AUTH),
        params=(TOPIC,),
        body=m.Batch,
        body_types=(BATCH_CONTENT_TYPE,),
        description=(
            "Without a partition a message goes to key_hash(key) % partitions, or "
            "round-robin over this node's partitions without a key. A repeated "
            "(producer_id, sequence) returns the first answer and writes nothing. "
            f"{BATCH_CONTENT_TYPE} bodies use the framing of docs/BATCH_FORMAT.md."
        ),
    ),
    Route(
        "get",
        "/v1/topics/{topic}/partitions/{partition}/messages",
        "read a partition from an offset or a store time",
        {"200": _columns("messages and the offset to continue from", m.ReadResult)},
        ("400", "404", "421", "503", "401"),
        params=(
            TOPIC,
            PARTITION,
            Param("offset", "query", INT64, "first offset (default: the first kept)"),
            Param(
                "start_time",
                "query",
                INT64,
                "start at the first message stored at or after this ms time",
            ),
            Param("end_time", "query", INT64, "stop before messages stored after this ms time"),
            _bounded("max_messages", 1, MAX_READ_MESSAGES, "default 100"),
            _bounded("max_bytes", 1, MAX_READ_BYTES, "default 1 MiB"),
            Param("tag", "query", {"type": "string"}, "only messages with this tag"),
            _bounded(
                "wait_ms",
                0,
                MAX_WAIT_MS,
                "long poll: when nothing is there to read, wait up to this long for "
                "the next append to the partition before answering (default 0)",
            ),
        ),
    ),
    Route(
        "post",
        "/v1/topics/{topic}/fetch",
        "read pages of several partitions in one request (Kafka's fetch)",
        {
            "200": _columns(
                "one page per partition; the binary answer is the fetch framing of "
                "docs/BATCH_FORMAT.md",
                m.FetchResult,
            )
        },
        ("400", "404", "421", "503", "401"),
        params=(TOPIC,),
        body=m.FetchRequest,
    ),
    Route(
        "get",
        "/v1/topics/{topic}/keys/{key}",
        "messages with this key, newest first (store time, then log position); "
        "unreachable_nodes names the nodes that did not answer",
        {"200": _columns("matches; limit_reached says more exist", m.LookupResult)},
        ("400", "404", "503", "401"),
        params=(
            TOPIC,
            Param("key", "path", {"type": "string", "minLength": 1}, "message key"),
            Param("begin", "query", INT64, "store time range start (ms)"),
            Param("end", "query", INT64, "store time range end (ms)"),
            _bounded("max", 1, MAX_LOOKUP, "default 32"),
            SCOPE,
        ),
    ),
    Route(
        "get",
        "/v1/messages/{msg_id}",
        "one message by its ID (503 incomplete when it is on no node that answered while "
        "others did not)",
        {"200": Reply("the message", m.Message)},
        ("400", "404", "503", "401"),
        params=(
            Param("msg_id", "path", {"type": "string", "minLength": 1}, "app-iphex-hour-seq"),
            SCOPE,
        ),
    ),
    Route(
        "get",
        "/v1/consumer-groups",
        "names of the consumer groups with committed offsets",
        {"200": Reply("groups", m.GroupList)},
        ("400", "503", "401"),
        params=(SCOPE,),
    ),
    Route(
        "post",
        "/v1/consumer-groups/{group}/offsets",
        "commit a group's next offset for one partition (at its owner)",
        {"200": Reply("committed", m.OffsetCommitted)},
        ("400", "404", "413", "421", "503", "507", *WRITE_AUTH),
        params=(GROUP,),
        body=m.OffsetCommit,
    ),
    Route(
        "get",
        "/v1/consumer-groups/{group}/offsets",
        "a group's committed offsets",
        {"200": Reply("offsets", m.CommittedOffsets)},
        ("400", "404", "503", "401"),
        params=(GROUP, _name("topic", "query", "only this topic"), SCOPE),
    ),
    Route(
        "delete",
        "/v1/consumer-groups/{group}/offsets",
        "forget a group's committed offsets: all, a topic's, or one partition's",
        {"200": Reply("deleted", m.OffsetsDeleted)},
        ("400", "404", "421", "503", *WRITE_AUTH),
        params=(GROUP, _name("topic", "query", "only this topic"), ONE_PARTITION, SCOPE),
    ),
    Route(
        "get",
        "/v1/cluster",
        "the routing table (nodes and partition owners)",
        {"200": Reply("routing table", m.Routing)},
        AUTH,
    ),
    Route(
        "get",
        "/v1/admin/files",
        "every file of this node: kind, state, sizes, time range",
        {"200": Reply("files", m.FileList)},
        ("400", "404", "409", "421", "503", "401"),
        params=(LOG,),
    ),
    Route(
        "post",
        "/v1/admin/compact",
        "seal the active files and compact everything sealed now",
        {"200": Reply("report", m.CompactReport)},
        ("400", "404", "409", "421", "503", "507", *WRITE_AUTH),
        params=(LOG,),
    ),
    Route(
        "post",
        "/v1/admin/drain",
        "refuse (true) or accept again (false) writes, before maintenance",
        {"200": Reply("new state", m.DrainState)},
        ("400", "413", *WRITE_AUTH),
        body=m.Drain,
    ),
    Route(
        "post",
        "/v1/admin/seal",
        "seal the active segment and key index now (before a remote compaction)",
        {"200": Reply("files now sealed", m.Sealed)},
        ("400", "404", "409", "421", "503", "507", *WRITE_AUTH),
        params=(LOG,),
    ),
    Route(
        "get",
        "/v1/admin/sealed",
        "sealed files waiting for compaction (for remote compaction jobs)",
        {"200": Reply("files", m.FileList)},
        ("400", "404", "409", "421", "503", "401"),
        params=(LOG,),
    ),
    Route(
        "get",
        "/v1/admin/files/{kind}/{name}",
        "the bytes of a sealed file; X-Msgstore-Crc32 holds their CRC-32",
        {"200": Reply("file bytes", other=(OCTETS,))},
        ("400", "404", "409", "421", "503", "401"),
        params=(FILE_KIND, FILE_NAME, LOG),
    ),
    Route(
        "put",
        "/v1/admin/files/{kind}/{name}/compacted",
        "replace a sealed file by its compacted form (verified, then atomic)",
        {"200": Reply("the committed file", m.FileInfo)},
        ("400", "404", "409", "413", "421", "503", "507", *WRITE_AUTH),
        params=(
            FILE_KIND,
            FILE_NAME,
            LOG,
            Param(
                "X-Msgstore-Crc32",
                "header",
                {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
                "CRC-32 of the body",
                required=True,
            ),
        ),
        body_types=(OCTETS,),
    ),
    # replicated logs (docs/REPLICATION.md): node-to-node and controller requests; with mTLS
    # the first four need a node's or the controller's certificate too (403 without)
    Route(
        "get",
        "/v1/replication/logs/{log}/fetch",
        "log bytes from a position (whole checked batches), long-polled; acknowledges it",
        {"200": Reply("log bytes", other=("application/x-msgstore-log",))},
        ("400", "404", "409", "421", "503", "401", "403"),
        params=(_name("log", "path", "replicated log id"),),
    ),
    Route(
        "get",
        "/v1/replication/logs/{log}/epoch-end",
        "where a leader epoch ended in this leader's log (KIP-101)",
        {"200": Reply("end position", schema=ANY_OBJECT)},
        ("400", "404", "409", "421", "503", "401", "403"),
        params=(_name("log", "path", "replicated log id"),),
    ),
    Route(
        "post",
        "/v1/replication/logs/{log}/fence",
        "(controller) stop following leaders older than an epoch; this copy's durable end",
        {"200": Reply("durable end", schema=ANY_OBJECT)},
        ("400", "404", "409", "503", *WRITE_AUTH),
        params=(_name("log", "path", "replicated log id"),),
    ),
    Route(
        "put",
        "/v1/replication/routing",
        "(controller) a newer routing table of this cluster, taken at once",
        {"200": Reply("the generation in force", m.RoutingTaken)},
        ("400", "409", "413", *WRITE_AUTH),
        body=m.RoutingOffer,
    ),
    Route(
        "get",
        "/v1/replication/status",
        "roles, epochs, lag and in-sync replicas of the logs held here",
        {"200": Reply("status", schema=ANY_OBJECT)},
        ("503", "401"),
    ),
)
