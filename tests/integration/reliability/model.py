"""A deliberately simple in-memory model of the store, the oracle of the property tests.

It holds every message in lists, one per (topic, partition), plus the global append order, so
each answer the store gives (read by offset, lookup by key and time range, message ID, offset
for a timestamp, committed offsets, idempotent retries) can be computed by brute force.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from storage_node.store import AppendResult, Message, TopicConfig


@dataclass
class StoreModel:
    topics: dict[str, TopicConfig] = field(default_factory=dict)
    partitions: dict[tuple[str, int], list[Message]] = field(default_factory=dict)
    order: list[Message] = field(default_factory=list)
    by_msg_id: dict[str, Message] = field(default_factory=dict)
    committed: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    batches: dict[tuple[str, int], list[AppendResult]] = field(default_factory=dict)

    def add_topic(self, config: TopicConfig) -> None:
        self.topics[config.name] = config
        for partition in range(config.partitions):
            self.partitions[(config.name, partition)] = []

    def next_offset(self, topic: str, partition: int) -> int:
        return len(self.partitions[(topic, partition)])

    def offsets(self, topic: str) -> list[tuple[int, int]]:
        count = self.topics[topic].partitions
        return [(0, self.next_offset(topic, p)) for p in range(count)]

    def add(self, message: Message) -> None:
        log = self.partitions[(message.topic, message.partition)]
        assert message.offset == len(log)
        log.append(message)
        self.order.append(message)
        self.by_msg_id[message.msg_id] = message

    def read(self, topic: str, partition: int, offset: int, max_messages: int) -> list[Message]:
        return self.partitions[(topic, partition)][offset : offset + max_messages]

    def with_key(self, topic: str, key: str) -> list[Message]:
        """Every message of ``topic`` with ``key``, newest first."""
        return [m for m in reversed(self.order) if m.topic == topic and m.key == key]

    def first_offset_at(self, topic: str, partition: int, ts_ms: int) -> int:
        for message in self.partitions[(topic, partition)]:
            if message.store_timestamp >= ts_ms:
                return message.offset
        return self.next_offset(topic, partition)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        self.committed.setdefault(group, {}).setdefault(topic, {})[partition] = offset
