"""Kafka groups' committed offsets, kept where msgstore keeps every group's offsets: by the
store serving the partition, the same entry the HTTP API and ``msgstore group describe`` /
``group reset`` use, so a group is one namespace whatever protocol its consumers speak.

The coordinator of a group need not serve its partitions: a commit for a partition served
by another node is sent to that node's HTTP API (``POST /v1/consumer-groups/{g}/offsets``),
and a fetch gathers every node's committed offsets of the group.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from storage_node.errors import MsgStoreError, UnknownTopic
from storage_node.server.peer_fanout import peer_documents
from storage_node.server.routes_topics import get_topic_config
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
        return int((await get_topic_config(self.rt, topic)).partitions)

    async def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Store one committed offset with the store serving the partition (durable, and on
        a replicated log held by its in-sync copies, before this returns)."""
        rt = self.rt
        node = self.node_of(topic, partition)
        if node != rt.settings.node_id:
            address = rt.routing.current().node_address_of_node(node)
            if address is None:
                raise UnknownTopic(f"no node serves {topic}/{partition}")
            path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
            body = {"topic": topic, "partition": partition, "offset": offset}
            await rt.peer_call("POST", address, path, {}, body)
            return
        rt.require_writable()
        store = rt.store_for(topic, partition)
        # a replicated log writes the commit into the log, so its copies hold it (failover)
        in_log = rt.routing.log_of(topic, partition) is not None and rt.replicas is not None
        await rt.in_thread(store.commit_offset, group, topic, partition, offset, in_log)
        await rt.replicated(topic, partition, store)

    async def committed(self, group: str) -> Committed:
        """Every offset the group committed, on this node and on every other one."""
        rt = self.rt
        offsets: dict[str, dict[int, int]] = {}
        for store in rt.read_stores():
            local = await rt.in_thread(store.committed_offsets, group, None)
            for topic, parts in local.items():
                offsets.setdefault(topic, {}).update(parts)
        path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
        answers, unreachable = await peer_documents(rt, path, {"scope": "local"})
        for answer in answers:
            for topic, parts in answer["offsets"].items():
                offsets.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})
        return Committed(offsets, frozenset(unreachable))

    async def groups(self) -> set[str]:
        """Every group with a committed offset anywhere in the cluster (those that reach it)."""
        rt = self.rt
        names: set[str] = set()
        for store in rt.read_stores():
            names.update(await rt.in_thread(store.consumer_groups))
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
        try:
            self.rt.require_store()
        except MsgStoreError:
            return True
        return False
