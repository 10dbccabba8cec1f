"""Kafka groups' committed offsets, kept where msgstore keeps every group's offsets: by the
store serving the partition, the same entry the HTTP API and ``msgstore group describe`` /
``group reset`` use, so a group is one namespace whatever protocol its consumers speak.

Everything goes through the node's partition service (``storage_node.partitions``). The
coordinator of a group need not serve its partitions: a commit the service answers
``NotLeader`` is sent to the leader's HTTP API (``POST /v1/consumer-groups/{g}/offsets``),
and a fetch gathers every node's committed offsets of the group.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from storage_node.errors import NotLeader, Unavailable
from storage_node.server.peer_fanout import peer_documents
from storage_node.server.runtime import NodeRuntime


@dataclass(frozen=True)
class Committed:
    """A group's committed offsets by topic and partition; ``unreachable`` names the nodes
    that did not answer (the offsets of the partitions they serve are unknown)."""

    offsets: dict[str, dict[int, int]]
    unreachable: frozenset[str]


class GroupOffsets:
    def __init__(self, runtime: NodeRuntime) -> None:
        self.rt = runtime

    async def partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has (UnknownTopic if it does not exist)."""
        return (await self.rt.partitions.topic_config(topic)).partitions

    async def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Store one committed offset with the store serving the partition (durable, and on
        a replicated log held by its in-sync copies, before this returns)."""
        try:
            await self.rt.partitions.commit_offset(group, topic, partition, offset)
        except NotLeader as exc:
            if exc.leader_address is None:
                raise Unavailable(f"no node serves {topic}/{partition} now") from None
            path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
            body = {"topic": topic, "partition": partition, "offset": offset}
            await self.rt.peer_call("POST", exc.leader_address, path, {}, body)

    async def committed(self, group: str) -> Committed:
        """Every offset the group committed, on this node and on every other one."""
        rt = self.rt
        offsets = await rt.partitions.committed_offsets(group, None)  # the logs led here
        path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
        answers, unreachable = await peer_documents(rt, path, {"scope": "local"})
        for answer in answers:
            for topic, parts in answer["offsets"].items():
                offsets.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})
        return Committed(offsets, frozenset(unreachable))

    async def groups(self) -> set[str]:
        """Every group with a committed offset anywhere in the cluster (those that reach it)."""
        rt = self.rt
        names = await rt.partitions.consumer_groups()
        answers, _unreachable = await peer_documents(rt, "/v1/consumer-groups", {"scope": "local"})
        for answer in answers:
            names.update(answer["groups"])
        return names

    def node_of(self, topic: str, partition: int) -> str:
        """The node serving a partition (this node for a partition the table does not route)."""
        table = self.rt.routing.current()
        owner = table.owner(topic, partition)
        return table.leader_of(owner) if owner is not None else self.rt.settings.node_id

    def loading(self) -> bool:
        """True while the node's store is not open yet (COORDINATOR_LOAD_IN_PROGRESS)."""
        return self.rt.partitions.own_store() is None
