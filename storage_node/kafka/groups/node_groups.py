"""The groups part of one node: its coordinator (in memory), the groups' committed offsets
(in the stores), and the checks every group request starts with (is this node the group's
coordinator; is its store open). What the Kafka handlers call; no Kafka framing here.
"""

from __future__ import annotations

import asyncio
import time
from typing import TypeVar

from storage_node.errors import (
    DiskFull,
    Fenced,
    InvalidName,
    MsgStoreError,
    NotEnoughReplicas,
    NotOwner,
    OffsetOutOfRange,
    Unavailable,
    UnknownTopic,
)
from storage_node.formats.names import is_valid_name
from storage_node.kafka.groups.coordinator import GroupCoordinator
from storage_node.kafka.groups.group import ErrorCode, Reply
from storage_node.kafka.groups.offsets import Committed, GroupOffsets
from storage_node.kafka.groups.placement import coordinator_of
from storage_node.server.runtime import NodeRuntime

T = TypeVar("T")
E = ErrorCode
MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes

# A failed offset write as Kafka's coordinator reports it: retry here later, look the
# coordinator up again, or a problem with the request itself.
_COMMIT_ERRORS: tuple[tuple[type[MsgStoreError], ErrorCode], ...] = (
    (UnknownTopic, E.UNKNOWN_TOPIC_OR_PARTITION),
    (InvalidName, E.INVALID_REQUEST),
    (OffsetOutOfRange, E.OFFSET_OUT_OF_RANGE),
    (NotOwner, E.NOT_COORDINATOR),
    (Fenced, E.NOT_COORDINATOR),
    (NotEnoughReplicas, E.COORDINATOR_NOT_AVAILABLE),
    (DiskFull, E.COORDINATOR_NOT_AVAILABLE),
    (Unavailable, E.COORDINATOR_NOT_AVAILABLE),
)


def commit_error(exc: MsgStoreError) -> ErrorCode:
    for cls, code in _COMMIT_ERRORS:
        if isinstance(exc, cls):
            return code
    return E.INVALID_REQUEST if exc.status == 400 else E.UNKNOWN_SERVER_ERROR


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class NodeGroups:
    def __init__(self, runtime: NodeRuntime, coordinator: GroupCoordinator | None = None) -> None:
        self.rt = runtime
        self.coordinator = coordinator or GroupCoordinator(monotonic_ms)
        self.offsets = GroupOffsets(runtime)
        # the metadata string of each offset last committed here, given back with that offset
        # (the store keeps offsets only; a restart forgets the strings)
        self.metadata: dict[tuple[str, str, int], tuple[int, str]] = {}

    def coordinator_node(self, group_id: str) -> str:
        return coordinator_of(group_id, self.rt.routing.current())

    def check(self, group_id: str) -> ErrorCode:
        """NONE when this node coordinates the group and can serve it now."""
        if not is_valid_name(group_id):
            return E.INVALID_GROUP_ID
        if self.coordinator_node(group_id) != self.rt.settings.node_id:
            return E.NOT_COORDINATOR
        if self.offsets.loading():
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NONE

    async def wait(self, reply: Reply[T]) -> T:
        """The reply's value once settled, running the coordinator's deadlines meanwhile
        (a waiting JoinGroup is what moves a rebalance on when members stay away)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def wake(_value: T) -> None:
            if not done.done():
                done.set_result(None)

        reply.on_settled(wake)
        while not reply.settled:
            deadline = self.coordinator.next_deadline()
            timeout = None if deadline is None else max(0, deadline - monotonic_ms()) / 1000
            await asyncio.wait({done}, timeout=timeout)
            self.coordinator.expire()
        return reply.result()

    async def commit(
        self, group: str, topic: str, partition: int, offset: int, metadata: str | None
    ) -> ErrorCode:
        """Store one committed offset; the Kafka error code of the outcome."""
        if metadata is not None and len(metadata.encode()) > MAX_METADATA_BYTES:
            return E.OFFSET_METADATA_TOO_LARGE
        try:
            if not 0 <= partition < await self.offsets.partitions(topic):
                return E.UNKNOWN_TOPIC_OR_PARTITION
            await self.offsets.commit(group, topic, partition, offset)
        except MsgStoreError as exc:
            return commit_error(exc)
        self.metadata[group, topic, partition] = (offset, metadata or "")
        return E.NONE

    async def committed(self, group: str) -> Committed:
        return await self.offsets.committed(group)

    def metadata_of(self, group: str, topic: str, partition: int, offset: int) -> str:
        kept = self.metadata.get((group, topic, partition))
        return kept[1] if kept is not None and kept[0] == offset else ""
