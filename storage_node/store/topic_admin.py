"""Creating and deleting a topic and adding partitions to one, on a Store.

Delete: under the append lock the registry drops the topic and records its tombstone (the
log end: every record of the old topic lies below it) in one atomic rewrite, then the
partitions' queue indexes and the groups' committed offsets go, and a checkpoint is taken.
The old records stay in the commit log until retention or compaction removes their
segments; lookups by key and message ID skip them (``TopicRegistry.visible``) and recovery
never re-indexes them, so nothing of the old topic comes back under the same name.

A crash between the registry rewrite and the removal of the queue folders or offsets leaves
them behind; ``purge_leftovers`` (at open) and ``clear_leftovers`` (a new topic) remove them.

Like ``Lifecycle``, ``TopicAdmin`` is handed the parts it changes (the registry, the
offsets, the current queues and log) and the store's two locks and checkpoint; it never
sees the store itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from storage_node.store.commitlog import CommitLog
from storage_node.store.offsets import OffsetStore
from storage_node.store.queues import PartitionQueues
from storage_node.store.topics import TopicRegistry
from storage_node.store.types import TopicConfig


class TopicAdmin:
    """Creates, deletes and grows the topics of one store (see above)."""

    def __init__(
        self,
        topics: TopicRegistry,
        offsets: OffsetStore,
        queues: Callable[[], PartitionQueues],
        log: Callable[[], CommitLog],
        append_lock: AbstractContextManager,
        checkpoint_lock: threading.Lock,
        checkpoint: Callable[[], object],
    ) -> None:
        """``queues`` and ``log`` give the parts the store serves from now (a rebuild after
        a failed write replaces them); ``checkpoint`` takes a (not clean) checkpoint."""
        self.topics = topics
        self.offsets = offsets
        self.queues = queues
        self.log = log
        self.append_lock = append_lock
        self.checkpoint_lock = checkpoint_lock
        self.checkpoint = checkpoint

    def create_topic(self, config: TopicConfig) -> bool:
        """Create a topic and its partitions' queues (False: it exists with this config)."""
        with self.append_lock:
            created = self.topics.create(config)
            cfg = self.topics.get(config.name)
            if created and config.name in self.topics.deleted:
                self.clear_leftovers(cfg.name)  # of a deleted incarnation (a crash mid-delete)
            queues = self.queues()
            for p in range(cfg.partitions):
                queues.get(cfg.name, p)
            return created

    def clear_leftovers(self, name: str) -> None:
        """Remove what a deleted incarnation of ``name`` may have left (append lock held,
        the topic not in the registry): queue indexes and committed offsets."""
        self.queues().remove_topic(name)
        self.offsets.drop_topic(name)

    def delete_topic(self, name: str) -> TopicConfig:
        """Delete a topic (UnknownTopic if there is none); returns its last config."""
        # the checkpoint lock too: a checkpoint walks the queues outside the append lock
        with self.checkpoint_lock, self.append_lock:
            cfg = self.topics.delete(name, self.log().end)
            self.clear_leftovers(name)
        self.checkpoint()
        return cfg

    def add_partitions(self, name: str, partitions: int) -> TopicConfig:
        """Raise the topic's partition count to ``partitions``; the new partitions start at
        offset 0 and the existing ones keep their data. Lowering it is refused (400)."""
        with self.checkpoint_lock, self.append_lock:
            old = self.topics.get(name)
            cfg = self.topics.grow(name, partitions)
            queues = self.queues()
            for p in range(old.partitions, cfg.partitions):
                queues.get(name, p)
        return cfg

    def purge_leftovers(self) -> list[str]:
        """(Open.) Remove leftovers of deleted topics and forget the tombstones whose
        records the log no longer holds; returns the names whose leftovers were removed."""
        purged = []
        queues = self.queues()
        for name in list(self.topics.deleted):
            if name in self.topics.topics:
                continue
            if queues.has_folder(name) or self.offsets.has_topic(name):
                self.clear_leftovers(name)
                purged.append(name)
        self.topics.forget_tombstones(self.log().start_pos)
        return purged
