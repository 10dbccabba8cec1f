"""What the partition service reads of the node's routing table (the server's
``RoutingState`` provides it; the service never reads or writes the routing file)."""

from __future__ import annotations

from typing import Protocol

from storage_node.wire.routing_table import RoutingTable, TopicRoute


class RoutingView(Protocol):
    @property
    def standalone(self) -> bool:
        """True for a node without a routing file (it serves every partition)."""
        ...

    @property
    def table(self) -> RoutingTable: ...

    def current(self) -> RoutingTable: ...

    def refresh_if_changed(self) -> bool: ...

    def route(self, topic: str) -> TopicRoute | None: ...

    def check_owner(self, topic: str, partition: int) -> None:
        """Raise NotLeader when the routing table sends the partition to another node."""
        ...

    def log_of(self, topic: str, partition: int) -> str | None:
        """The replicated log holding a partition (None when logs are not replicated)."""
        ...

    def deletion_done(self, name: str, node_ids: frozenset[str]) -> None: ...
