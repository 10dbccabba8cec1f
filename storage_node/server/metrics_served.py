"""Which stores and partitions this node answers for, as the metrics see them.

Every series about a partition or a replicated log comes from the node that serves it (the
owner, or the log's leader), so a cluster-wide sum counts each partition once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Served:
    """One store this node holds, named by its log (the node id without replicated logs),
    and whether this node serves its partitions (leads the log)."""

    log: str
    store: Any
    serving: bool


def stores_of(runtime: Any) -> list[Served]:
    """Every store of the node: its own, or one per replicated log it holds a copy of."""
    replicas = runtime.replicas
    if replicas is not None:
        return [
            Served(log_id, hosted.store, hosted.role == "leader")
            for log_id, hosted in sorted(list(replicas.logs.items()))
        ]
    store = runtime.store
    if store is None:
        return []
    return [Served(runtime.settings.node_id, store, True)]


def served_partitions(runtime: Any) -> Iterator[tuple[Served, str, list[int]]]:
    """(store, topic, partitions) for every partition this node serves."""
    routing = runtime.routing
    for served in stores_of(runtime):
        if not served.serving:
            continue
        topics = served.store.list_topics()
        if runtime.replicas is not None:
            table = routing.current()
            for cfg in topics:
                route = table.topics.get(cfg.name)
                if route is not None:
                    mine = [p for p, owner in enumerate(route.owners) if owner == served.log]
                    yield served, cfg.name, mine
        elif routing.standalone:
            for cfg in topics:
                yield served, cfg.name, list(range(cfg.partitions))
        else:
            table = routing.current()
            for cfg in topics:
                yield served, cfg.name, table.owned_partitions(cfg.name, runtime.settings.node_id)
