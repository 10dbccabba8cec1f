"""Which node coordinates a group: chosen from the routing table alone, so every node answers
FindCoordinator the same and only that node accepts the group's requests.

The group id's CRC-32 picks one of the table's nodes; with replicated logs it picks a log
and the coordinator is that log's leader, so a failover moves the coordinator with the log
(its members get NOT_COORDINATOR, look it up again and rejoin there). A standalone node
coordinates every group.
"""

from __future__ import annotations

import zlib

from storage_node.wire.routing_table import RoutingTable


def coordinator_of(group_id: str, table: RoutingTable) -> str:
    """The id of the node coordinating ``group_id``."""
    slot = zlib.crc32(group_id.encode())
    if table.logs:
        log_ids = sorted(table.logs)
        return table.leader_of(log_ids[slot % len(log_ids)])
    return table.nodes[slot % len(table.nodes)].id
