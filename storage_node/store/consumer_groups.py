"""Consumer groups: committed offsets checked against the partitions they name.

The offsets themselves are kept by ``offsets.OffsetStore``; this is the store's entry to
them: names, topics and offsets are checked first, so a bad commit changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from storage_node.errors import OffsetOutOfRange
from storage_node.formats.names import check_name
from storage_node.formats.queue_index import QueueIndex
from storage_node.store.arguments import check_int
from storage_node.store.offsets import OffsetStore
from storage_node.store.topics import TopicRegistry
from storage_node.store.types import TopicConfig


class ConsumerGroups:
    def __init__(
        self,
        offsets: OffsetStore,
        topics: TopicRegistry,
        partition: Callable[[str, int], tuple[TopicConfig, QueueIndex]],
        check_open: Callable[[], None],
    ) -> None:
        """``partition(topic, p)`` checks both and returns the partition's queue."""
        self.offsets = offsets
        self.topics = topics
        self.partition = partition
        self.check_open = check_open

    def check(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Refuse a bad commit before anything is written (names, partition, offset)."""
        self.check_open()
        check_name("group", group)
        _cfg, q = self.partition(topic, partition)
        offset = check_int("offset", offset, 0, 2**63 - 1)
        if offset > q.next_offset:
            raise OffsetOutOfRange(
                f"offset {offset} is beyond next offset {q.next_offset} of {topic}/{partition}",
                next_offset=q.next_offset,
            )

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        self.check(group, topic, partition, offset)
        self.offsets.commit(group, topic, int(partition), offset)

    def check_delete(self, group: str, topic: str | None, partition: int | None) -> None:
        """Refuse a bad deletion before anything is written (names, the partition)."""
        self.check_open()
        check_name("group", group)
        if topic is not None and partition is not None:
            self.partition(topic, partition)
        elif topic is not None:
            check_name("topic", topic)

    def groups(self) -> list[str]:
        return sorted(self.offsets.get_groups())

    def committed(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        check_name("group", group)
        if topic is not None:
            self.topics.get(topic)
        return self.offsets.get(group, topic)
