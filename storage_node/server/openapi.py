"""The hand-written OpenAPI 3.0 document of the node API (served at /v1/openapi.json).

Written by hand rather than generated so it states the promises (statuses, shapes, limits);
the fuzz tests in tests/node drive the server from it, which keeps it honest.
"""

from __future__ import annotations

import copy
from typing import Any

import storage_node
from storage_node.server.batch_codec import CONTENT_TYPE as BATCH_CONTENT_TYPE

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,200}$"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _ok(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": _json(schema)}


def _ok_or_columns(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A read answer: JSON by default, the binary read framing when Accept asks for it."""
    return {
        "description": (
            f"{description}. With 'Accept: {BATCH_CONTENT_TYPE}' the same answer comes as "
            "columns in the read framing of docs/BATCH_FORMAT.md"
        ),
        "content": {
            **_json(schema),
            BATCH_CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}},
        },
    }


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": _json(_ref("Error"))}


ERRORS = {
    "400": "malformed input (code names the problem); nothing changed",
    "401": "missing or invalid bearer token",
    "403": "the token may only read",
    "404": "unknown topic, message or file",
    "409": "a topic exists with another configuration, or a message ID is already taken",
    "413": "body or message larger than the limit",
    "415": "unsupported body content type",
    "421": "another node owns the partition; 'owner' holds its address",
    "503": "the node is recovering, draining or a peer cannot answer",
    "507": "the data disk is full",
}


def _errors(*codes: str) -> dict[str, Any]:
    return {code: _error(ERRORS[code]) for code in codes}


def _param(
    name: str, where: str, schema: dict[str, Any], description: str, required: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "description": description,
        "schema": schema,
    }


TOPIC = _param("topic", "path", {"type": "string", "pattern": NAME_PATTERN}, "topic name")
GROUP = _param("group", "path", {"type": "string", "pattern": NAME_PATTERN}, "consumer group")
SCOPE = _param(
    "scope",
    "query",
    {"type": "string", "enum": ["cluster", "local"]},
    "cluster (default): merge the answers of every node; local: this node only",
)
INT64 = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
NULLABLE_STR = {"type": "string", "nullable": True}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "owner": {"type": "string", "nullable": True},
                    "owner_id": {"type": "string"},
                },
                "additionalProperties": True,
            }
        },
    },
    "TopicSpec": {
        "type": "object",
        "required": ["name", "partitions"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": NAME_PATTERN, "not": {"enum": [".", ".."]}},
            "partitions": {"type": "integer", "minimum": 1, "maximum": 1024},
            "compression": {"type": "string", "enum": ["none", "lz4"], "default": "lz4"},
            "retention_hours": {
                "type": "number",
                "exclusiveMinimum": True,
                "minimum": 0,
                "maximum": 1_000_000,
                "default": 168,
            },
        },
    },
    "Topic": {
        "type": "object",
        "required": ["name", "partitions", "compression", "retention_hours", "owners"],
        "properties": {
            "name": {"type": "string"},
            "partitions": {"type": "integer"},
            "compression": {"type": "string"},
            "retention_hours": {"type": "number"},
            "owners": {"type": "array", "items": {"type": "string"}},
            "skipped_nodes": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "(create) nodes left out of a new topic because they were "
                "not ready, with the reason",
            },
        },
    },
    "TopicDetail": {
        "allOf": [
            _ref("Topic"),
            {
                "type": "object",
                "required": ["partition_offsets", "unreachable_nodes"],
                "properties": {
                    "partition_offsets": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["partition", "owner", "first_offset", "next_offset"],
                            "properties": {
                                "partition": {"type": "integer"},
                                "owner": {"type": "string"},
                                "owner_address": NULLABLE_STR,
                                "first_offset": {"type": "integer", "nullable": True},
                                "next_offset": {"type": "integer", "nullable": True},
                            },
                        },
                    },
                    "unreachable_nodes": {"type": "array", "items": {"type": "string"}},
                },
            },
        ]
    },
    "MessageIn": {
        "type": "object",
        "additionalProperties": False,
        "description": "exactly one of value (UTF-8 text) and value_base64 (bytes)",
        "properties": {
            "value": {"type": "string"},
            "value_base64": {"type": "string", "format": "byte"},
            "key": NULLABLE_STR,
            "tag": NULLABLE_STR,
            "msg_id": {**NULLABLE_STR, "description": "app-iphex-hour-seq; assigned when absent"},
            "timestamp": {**INT64, "nullable": True, "description": "born time, ms since epoch"},
            "partition": {"type": "integer", "minimum": 0, "nullable": True},
        },
    },
    "Batch": {
        "type": "object",
        "required": ["messages"],
        "additionalProperties": False,
        "properties": {
            "messages": {"type": "array", "minItems": 1, "items": _ref("MessageIn")},
            "producer_id": {"type": "string", "minLength": 1},
            "sequence": INT64,
        },
    },
    "AppendResults": {
        "type": "object",
        "required": ["results"],
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["partition", "offset", "msg_id"],
                    "properties": {
                        "partition": {"type": "integer"},
                        "offset": {"type": "integer"},
                        "msg_id": {"type": "string"},
                    },
                },
            }
        },
    },
    "BinaryAppendResults": {
        "type": "object",
        "description": "answer to a binary batch: one column per field",
        "required": ["count", "partitions", "offsets", "msg_ids"],
        "properties": {
            "count": {"type": "integer"},
            "partitions": {"type": "array", "items": {"type": "integer"}},
            "offsets": {"type": "array", "items": {"type": "integer"}},
            "msg_ids": {"type": "array", "items": {"type": "string"}},
        },
    },
    "Message": {
        "type": "object",
        "required": ["topic", "partition", "offset", "msg_id", "timestamp", "store_timestamp"],
        "properties": {
            "topic": {"type": "string"},
            "partition": {"type": "integer"},
            "offset": {"type": "integer"},
            "key": NULLABLE_STR,
            "tag": NULLABLE_STR,
            "msg_id": {"type": "string"},
            "timestamp": {"type": "integer"},
            "store_timestamp": {"type": "integer"},
            "value": {"type": "string"},
            "value_base64": {"type": "string"},
        },
    },
    "ReadResult": {
        "type": "object",
        "required": ["messages", "next_offset"],
        "properties": {
            "messages": {"type": "array", "items": _ref("Message")},
            "next_offset": {"type": "integer"},
            "end_reached": {"type": "boolean"},
        },
    },
    "LookupResult": {
        "type": "object",
        "required": ["messages", "limit_reached"],
        "properties": {
            "messages": {"type": "array", "items": _ref("Message")},
            "limit_reached": {"type": "boolean"},
            "unreachable_nodes": {"type": "array", "items": {"type": "string"}},
        },
    },
    "OffsetCommit": {
        "type": "object",
        "required": ["topic", "partition", "offset"],
        "additionalProperties": False,
        "properties": {
            "topic": {"type": "string", "pattern": NAME_PATTERN},
            "partition": {"type": "integer", "minimum": 0, "maximum": 1023},
            "offset": INT64,
        },
    },
    "OffsetCommitted": {
        "type": "object",
        "required": ["group", "topic", "partition", "offset"],
        "properties": {
            "group": {"type": "string"},
            "topic": {"type": "string"},
            "partition": {"type": "integer"},
            "offset": {"type": "integer"},
        },
    },
    "CommittedOffsets": {
        "type": "object",
        "required": ["group", "offsets"],
        "properties": {
            "group": {"type": "string"},
            "offsets": {
                "type": "object",
                "description": "topic -> partition (as a string) -> next offset to consume",
                "additionalProperties": {
                    "type": "object",
                    "additionalProperties": {"type": "integer"},
                },
            },
            "unreachable_nodes": {"type": "array", "items": {"type": "string"}},
        },
    },
    "Routing": {
        "type": "object",
        "description": "the routing table, format in docs/ROUTING.md",
        "required": ["format", "generation", "managed_by", "nodes", "topics"],
        "properties": {
            "format": {"type": "integer", "enum": [1]},
            "generation": {"type": "integer"},
            "managed_by": {"type": "string", "enum": ["local", "operator", "standalone"]},
            "nodes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "address"],
                    "properties": {"id": {"type": "string"}, "address": {"type": "string"}},
                },
            },
            "topics": {"type": "object", "additionalProperties": _ref("Topic")},
        },
    },
    "FileInfo": {
        "type": "object",
        "required": ["kind", "state", "name", "size", "stored_size"],
        "properties": {
            "kind": {"type": "string", "enum": ["segment", "key_index"]},
            "state": {"type": "string", "enum": ["unsealed", "sealed", "compacted", "uploaded"]},
            "name": {"type": "string"},
            "size": {"type": "integer"},
            "stored_size": {"type": "integer"},
            "begin_ms": {"type": "integer", "nullable": True},
            "end_ms": {"type": "integer", "nullable": True},
        },
    },
    "FileList": {
        "type": "object",
        "required": ["node", "files"],
        "properties": {
            "node": {"type": "string"},
            "address": {"type": "string"},
            "files": {"type": "array", "items": _ref("FileInfo")},
        },
    },
}
# the Topic schema inside Routing has no "name"
SCHEMAS["RoutedTopic"] = copy.deepcopy(SCHEMAS["Topic"])
SCHEMAS["RoutedTopic"]["required"] = ["partitions", "owners"]
SCHEMAS["Routing"]["properties"]["topics"]["additionalProperties"] = _ref("RoutedTopic")

V1 = ("401", "403")


def _paths() -> dict[str, Any]:
    return {
        "/healthz": {
            "get": {
                "summary": "liveness: the process serves HTTP",
                "security": [],
                "responses": {"200": _ok("alive", {"type": "object"})},
            }
        },
        "/readyz": {
            "get": {
                "summary": "readiness: the store finished recovery and the node is not draining",
                "security": [],
                "responses": {
                    "200": _ok("ready", {"type": "object"}),
                    "503": _ok("not ready", {"type": "object"}),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics (text exposition format)",
                "security": [],
                "responses": {
                    "200": {
                        "description": "metrics",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/v1/openapi.json": {
            "get": {
                "summary": "this document",
                "responses": {
                    "200": _ok("OpenAPI 3.0 document", {"type": "object"}),
                    **_errors("401"),
                },
            }
        },
        "/v1/topics": {
            "post": {
                "summary": "create a topic (201); an identical repeat answers 200",
                "requestBody": {"required": True, "content": _json(_ref("TopicSpec"))},
                "responses": {
                    "201": _ok("created", _ref("Topic")),
                    "200": _ok("an identical topic already exists", _ref("Topic")),
                    **_errors("400", "409", "413", "503", "507", *V1),
                },
            },
            "get": {
                "summary": "list topics",
                "responses": {
                    "200": _ok(
                        "topics",
                        {
                            "type": "object",
                            "required": ["topics"],
                            "properties": {"topics": {"type": "array", "items": _ref("Topic")}},
                        },
                    ),
                    **_errors("503", "401"),
                },
            },
        },
        "/v1/topics/{topic}": {
            "get": {
                "summary": "a topic with each partition's owner and first/next offsets",
                "parameters": [TOPIC, SCOPE],
                "responses": {
                    "200": _ok("the topic", _ref("TopicDetail")),
                    **_errors("400", "404", "503", "401"),
                },
            }
        },
        "/v1/topics/{topic}/messages": {
            "post": {
                "summary": "append a batch; answers once durable per the flush policy",
                "description": (
                    "Without a partition a message goes to key_hash(key) % partitions, or "
                    "round-robin over this node's partitions without a key. A repeated "
                    "(producer_id, sequence) returns the first answer and writes nothing. "
                    f"{BATCH_CONTENT_TYPE} bodies use the framing of docs/BATCH_FORMAT.md."
                ),
                "parameters": [TOPIC],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": _ref("Batch")},
                        BATCH_CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}},
                    },
                },
                "responses": {
                    "200": {
                        "description": (
                            "appended (results in batch order). A binary batch sent with "
                            f"'Accept: {BATCH_CONTENT_TYPE}' gets the results as columns "
                            "(the append answer of docs/BATCH_FORMAT.md)"
                        ),
                        "content": {
                            **_json(
                                {"oneOf": [_ref("AppendResults"), _ref("BinaryAppendResults")]}
                            ),
                            BATCH_CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}},
                        },
                    },
                    **_errors("400", "404", "409", "413", "415", "421", "503", "507", *V1),
                },
            }
        },
        "/v1/topics/{topic}/partitions/{partition}/messages": {
            "get": {
                "summary": "read a partition from an offset or a store time",
                "parameters": [
                    TOPIC,
                    _param(
                        "partition",
                        "path",
                        {"type": "integer", "minimum": 0, "maximum": 1023},
                        "partition",
                    ),
                    _param("offset", "query", INT64, "first offset (default: the first kept)"),
                    _param(
                        "start_time",
                        "query",
                        INT64,
                        "start at the first message stored at or after this ms time",
                    ),
                    _param(
                        "end_time", "query", INT64, "stop before messages stored after this ms time"
                    ),
                    _param(
                        "max_messages",
                        "query",
                        {"type": "integer", "minimum": 1, "maximum": 10000},
                        "default 100",
                    ),
                    _param(
                        "max_bytes",
                        "query",
                        {"type": "integer", "minimum": 1, "maximum": 64 * 1024 * 1024},
                        "default 1 MiB",
                    ),
                    _param("tag", "query", {"type": "string"}, "only messages with this tag"),
                    _param(
                        "wait_ms",
                        "query",
                        {"type": "integer", "minimum": 0, "maximum": 30000},
                        "long poll: when nothing is there to read, wait up to this long for "
                        "the next append to the partition before answering (default 0)",
                    ),
                ],
                "responses": {
                    "200": _ok_or_columns(
                        "messages and the offset to continue from", _ref("ReadResult")
                    ),
                    **_errors("400", "404", "421", "503", "401"),
                },
            }
        },
        "/v1/topics/{topic}/keys/{key}": {
            "get": {
                "summary": "messages with this key, newest first",
                "parameters": [
                    TOPIC,
                    _param("key", "path", {"type": "string", "minLength": 1}, "message key"),
                    _param("begin", "query", INT64, "store time range start (ms)"),
                    _param("end", "query", INT64, "store time range end (ms)"),
                    _param(
                        "max",
                        "query",
                        {"type": "integer", "minimum": 1, "maximum": 10000},
                        "default 32",
                    ),
                    SCOPE,
                ],
                "responses": {
                    "200": _ok_or_columns(
                        "matches; limit_reached says more exist", _ref("LookupResult")
                    ),
                    **_errors("400", "404", "503", "401"),
                },
            }
        },
        "/v1/messages/{msg_id}": {
            "get": {
                "summary": "one message by its ID",
                "parameters": [
                    _param(
                        "msg_id", "path", {"type": "string", "minLength": 1}, "app-iphex-hour-seq"
                    ),
                    SCOPE,
                ],
                "responses": {
                    "200": _ok("the message", _ref("Message")),
                    **_errors("400", "404", "503", "401"),
                },
            }
        },
        "/v1/consumer-groups": {
            "get": {
                "summary": "names of the consumer groups with committed offsets",
                "parameters": [SCOPE],
                "responses": {
                    "200": _ok(
                        "groups",
                        {
                            "type": "object",
                            "required": ["groups", "unreachable_nodes"],
                            "properties": {
                                "groups": {"type": "array", "items": {"type": "string"}},
                                "unreachable_nodes": {
                                    "type": "array",
                                    "items": {"type": "string"},
                                },
                            },
                        },
                    ),
                    **_errors("400", "503", "401"),
                },
            }
        },
        "/v1/consumer-groups/{group}/offsets": {
            "post": {
                "summary": "commit a group's next offset for one partition (at its owner)",
                "parameters": [GROUP],
                "requestBody": {"required": True, "content": _json(_ref("OffsetCommit"))},
                "responses": {
                    "200": _ok("committed", _ref("OffsetCommitted")),
                    **_errors("400", "404", "413", "421", "503", "507", *V1),
                },
            },
            "get": {
                "summary": "a group's committed offsets",
                "parameters": [
                    GROUP,
                    _param(
                        "topic",
                        "query",
                        {"type": "string", "pattern": NAME_PATTERN},
                        "only this topic",
                    ),
                    SCOPE,
                ],
                "responses": {
                    "200": _ok("offsets", _ref("CommittedOffsets")),
                    **_errors("400", "404", "503", "401"),
                },
            },
        },
        "/v1/cluster": {
            "get": {
                "summary": "the routing table (nodes and partition owners)",
                "responses": {"200": _ok("routing table", _ref("Routing")), **_errors("401")},
            }
        },
        "/v1/admin/files": {
            "get": {
                "summary": "every file of this node: kind, state, sizes, time range",
                "responses": {"200": _ok("files", _ref("FileList")), **_errors("503", "401")},
            }
        },
        "/v1/admin/compact": {
            "post": {
                "summary": "seal the active files and compact everything sealed now",
                "responses": {
                    "200": _ok("report", {"type": "object", "required": ["node", "report"]}),
                    **_errors("503", "507", *V1),
                },
            }
        },
        "/v1/admin/drain": {
            "post": {
                "summary": "refuse (true) or accept again (false) writes, before maintenance",
                "requestBody": {
                    "required": True,
                    "content": _json(
                        {
                            "type": "object",
                            "required": ["draining"],
                            "additionalProperties": False,
                            "properties": {"draining": {"type": "boolean"}},
                        }
                    ),
                },
                "responses": {
                    "200": _ok("new state", {"type": "object", "required": ["draining"]}),
                    **_errors("400", "413", *V1),
                },
            }
        },
        "/v1/admin/seal": {
            "post": {
                "summary": "seal the active segment and key index now (before a remote compaction)",
                "responses": {
                    "200": _ok("files now sealed", {"type": "object", "required": ["sealed"]}),
                    **_errors("503", "401", "403"),
                },
            }
        },
        "/v1/admin/sealed": {
            "get": {
                "summary": "sealed files waiting for compaction (for remote compaction jobs)",
                "responses": {"200": _ok("files", _ref("FileList")), **_errors("503", "401")},
            }
        },
        "/v1/admin/files/{kind}/{name}": {
            "get": {
                "summary": "the bytes of a sealed file; X-Msgstore-Crc32 holds their CRC-32",
                "parameters": [
                    _param(
                        "kind",
                        "path",
                        {"type": "string", "enum": ["segment", "key_index"]},
                        "file kind",
                    ),
                    _param(
                        "name", "path", {"type": "string", "pattern": NAME_PATTERN}, "file name"
                    ),
                ],
                "responses": {
                    "200": {
                        "description": "file bytes",
                        "content": {
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary"}
                            }
                        },
                    },
                    **_errors("400", "404", "503", "401"),
                },
            }
        },
        "/v1/admin/files/{kind}/{name}/compacted": {
            "put": {
                "summary": "replace a sealed file by its compacted form (verified, then atomic)",
                "parameters": [
                    _param(
                        "kind",
                        "path",
                        {"type": "string", "enum": ["segment", "key_index"]},
                        "file kind",
                    ),
                    _param(
                        "name", "path", {"type": "string", "pattern": NAME_PATTERN}, "file name"
                    ),
                    _param(
                        "X-Msgstore-Crc32",
                        "header",
                        {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
                        "CRC-32 of the body",
                        required=True,
                    ),
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/octet-stream": {
                            "schema": {"type": "string", "format": "binary"}
                        }
                    },
                },
                "responses": {
                    "200": _ok("the committed file", _ref("FileInfo")),
                    **_errors("400", "404", "409", "413", "503", "507", *V1),
                },
            }
        },
        **_replication_paths(),
    }


def _replication_paths() -> dict[str, Any]:
    """Replicated logs (docs/REPLICATION.md): node-to-node and controller requests."""
    log = _param("log", "path", {"type": "string"}, "the replicated log's id")
    obj = {"type": "object"}
    return {
        "/v1/replication/logs/{log}/fetch": {
            "get": {
                "summary": "log bytes from a position (whole checked batches), long-polled",
                "parameters": [log],
                "responses": {"200": _ok("log bytes", obj), **_errors("400", "409", "421", "503")},
            }
        },
        "/v1/replication/logs/{log}/epoch-end": {
            "get": {
                "summary": "where a leader epoch ended in this leader's log",
                "parameters": [log],
                "responses": {"200": _ok("end", obj), **_errors("400", "409", "421", "503")},
            }
        },
        "/v1/replication/logs/{log}/fence": {
            "post": {
                "summary": "(controller) stop following leaders older than an epoch",
                "parameters": [log],
                "responses": {"200": _ok("position", obj), **_errors("400", "409", "503")},
            }
        },
        "/v1/replication/status": {
            "get": {
                "summary": "roles, epochs, lag and in-sync replicas of the logs held here",
                "responses": {"200": _ok("status", obj), **_errors("503")},
            }
        },
    }


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the document (callers may mutate it)."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "msgstore node API",
            "version": storage_node.__version__,
            "description": 'One storage node. Errors are {"error": {"code", "message", ...}}.',
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": copy.deepcopy(_paths()),
        "components": {
            "schemas": copy.deepcopy(SCHEMAS),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
