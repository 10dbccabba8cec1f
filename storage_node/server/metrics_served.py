"""Which stores and partitions this node answers for, as the metrics see them: the partition
service's answer (one path from any request, a scrape included, to the stores).

Every series about a partition or a replicated log comes from the node that serves it (the
owner, or the log's leader), so a cluster-wide sum counts each partition once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from storage_node.partitions import PartitionService
from storage_node.store import Store


@dataclass(frozen=True)
class Served:
    """One store this node holds, named by its log (the node id without replicated logs),
    and whether this node serves its partitions (leads the log)."""

    log: str
    store: Store
    serving: bool


def stores_of(partitions: PartitionService) -> list[Served]:
    """Every store of the node: its own, or one per replicated log it holds a copy of."""
    return [Served(log_id, store, led) for log_id, store, led in partitions.hosted_logs()]


def served_partitions(partitions: PartitionService) -> Iterator[tuple[Served, str, list[int]]]:
    """(store, topic, partitions) for every partition this node serves."""
    for log_id, store, topic, mine in partitions.served_partitions():
        yield Served(log_id, store, True), topic, mine
