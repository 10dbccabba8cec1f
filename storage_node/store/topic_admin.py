"""Creating and deleting a topic and adding partitions to one, on a Store.

Delete: under the append lock the registry drops the topic and records its tombstone (the
log end: every record of the old topic lies below it) in one atomic rewrite, then the
partitions' queue indexes and the groups' committed offsets go, and a checkpoint is taken.
The old records stay in the commit log until retention or compaction removes their
segments; lookups by key and message ID skip them (``TopicRegistry.visible``) and recovery
never re-indexes them, so nothing of the old topic comes back under the same name.

A crash between the registry rewrite and the removal of the queue folders or offsets leaves
them behind; ``purge_leftovers`` (at open) and ``clear_leftovers`` (a new topic) remove them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage_node.store.types import TopicConfig

if TYPE_CHECKING:
    from storage_node.store.store import Store


def create_topic(store: Store, config: TopicConfig) -> bool:
    """Create a topic and its partitions' queues (False: it exists with this config)."""
    with store._lock:
        created = store.topics.create(config)
        cfg = store.topics.get(config.name)
        if created and config.name in store.topics.deleted:
            clear_leftovers(store, cfg.name)  # of a deleted incarnation (a crash mid-delete)
        for p in range(cfg.partitions):
            store.queue(cfg.name, p)
        return created


def clear_leftovers(store: Store, name: str) -> None:
    """Remove what a deleted incarnation of ``name`` may have left (append lock held, the
    topic not in the registry): queue indexes and committed offsets."""
    store.queues.remove_topic(name)
    store.offsets.drop_topic(name)


def delete_topic(store: Store, name: str) -> TopicConfig:
    """Delete a topic (UnknownTopic if there is none); returns its last config."""
    # the checkpoint lock too: a checkpoint walks the queues outside the append lock
    with store._ckpt_lock, store._lock:
        cfg = store.topics.delete(name, store.log.end)
        clear_leftovers(store, name)
    store.checkpoint(clean=False)
    return cfg


def add_partitions(store: Store, name: str, partitions: int) -> TopicConfig:
    """Raise the topic's partition count to ``partitions``; the new partitions start at
    offset 0 and the existing ones keep their data. Lowering it is refused (400)."""
    with store._ckpt_lock, store._lock:
        old = store.topics.get(name)
        cfg = store.topics.grow(name, partitions)
        for p in range(old.partitions, cfg.partitions):
            store.queue(name, p)
    return cfg


def purge_leftovers(store: Store) -> list[str]:
    """(Open.) Remove leftovers of deleted topics and forget the tombstones whose records
    the log no longer holds; returns the names whose leftovers were removed."""
    purged = []
    for name in list(store.topics.deleted):
        if name in store.topics.topics:
            continue
        if store.queues.has_folder(name) or store.offsets.has_topic(name):
            clear_leftovers(store, name)
            purged.append(name)
    store.topics.forget_tombstones(store.log.start_pos)
    return purged
