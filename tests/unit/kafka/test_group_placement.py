"""Which node coordinates a group: the same answer from the same routing table on every node,
spread over the nodes, and following a replicated log's leader through a failover."""

from __future__ import annotations

from dataclasses import replace

from storage_node.kafka.groups.placement import coordinator_of
from storage_node.wire.routing_table import new_local_table, standalone_table

NODES = [("n0", "http://127.0.0.1:1"), ("n1", "http://127.0.0.1:2"), ("n2", "http://127.0.0.1:3")]


def test_a_standalone_node_coordinates_every_group():
    table = standalone_table("solo", "http://127.0.0.1:1", {})
    assert {coordinator_of(f"g{i}", table) for i in range(50)} == {"solo"}


def test_every_node_computes_the_same_coordinator_and_groups_spread_over_nodes():
    table = new_local_table(NODES)
    again = new_local_table(list(NODES))
    picks = [coordinator_of(f"group-{i}", table) for i in range(300)]
    assert picks == [coordinator_of(f"group-{i}", again) for i in range(300)]
    assert {p: picks.count(p) > 50 for p in ("n0", "n1", "n2")} == dict.fromkeys(
        ("n0", "n1", "n2"), True
    )


def test_with_replicated_logs_the_coordinator_follows_the_log_leader():
    table = new_local_table(NODES, replication_factor=3)
    group = next(f"g{i}" for i in range(100) if coordinator_of(f"g{i}", table) == "n1")
    logs = dict(table.logs)
    logs["n1"] = replace(logs["n1"], leader="n2", epoch=2)  # n1's log failed over to n2
    assert coordinator_of(group, table.with_logs(logs)) == "n2"
