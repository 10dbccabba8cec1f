"""pydantic models of the topic API's answers (``routes_topics.py``): a topic, the list,
a topic described with each partition's offsets and stored bytes, and the answers of
delete and add-partitions. Documented in the OpenAPI document; the routes build the JSON."""

from __future__ import annotations

from pydantic import Field

from storage_node.server.api_models import Answer


class Topic(Answer):
    name: str
    partitions: int
    compression: str
    retention_hours: float
    owners: list[str]
    skipped_nodes: dict[str, str] | None = Field(
        default=None,
        description="(create) nodes left out of a new topic because they were not ready, "
        "with the reason",
    )


class TopicList(Answer):
    topics: list[Topic]


class TopicGrown(Topic):
    previous_partitions: int
    pending_nodes: dict[str, str] = Field(
        description="nodes that did not answer, with the reason; each applies the new count "
        "when it next reads the routing table"
    )


class TopicDeleted(Answer):
    name: str
    deleted: bool
    pending_nodes: dict[str, str] = Field(
        description="nodes that did not answer, with the reason; each deletes its copy when "
        "it next reads the routing table"
    )


class PartitionOffsets(Answer):
    partition: int
    owner: str = Field(description="the node (or replicated log) the partition belongs to")
    owner_address: str | None = Field(
        default=None,
        description="the address of the node that serves it: a replicated log's leader, "
        "after a failover another node than the owner",
    )
    first_offset: int | None
    next_offset: int | None
    stored_bytes: int | None = Field(
        default=None,
        description="the bytes of the records the partition holds from its first to its next "
        "offset (row header, key, tag, message ID, headers and body, as written to the log, "
        "before file compression); null when its node did not answer",
    )


class TopicDetail(Topic):
    partition_offsets: list[PartitionOffsets]
    unreachable_nodes: list[str]
