"""A failover on a local replicated cluster, as the failover tests make one: kill the node
leading a topic's first partition and wait until the survivors lead all of its partitions."""

from __future__ import annotations

from typing import Any

from storage_node.cli.local import LocalCluster, NodeProcess
from storage_node.client import Client
from storage_node.errors import MsgStoreError
from tests.waiting import wait_until


def fail_over(
    cluster: LocalCluster, topic: str, before: list[dict[str, Any]]
) -> tuple[NodeProcess, dict[str, Any]]:
    """Kills the node leading partition 0 of ``topic`` (``before``: describe's partition
    offsets) and returns it with the topic's description once no partition names it and every
    node answers (503s while the new leader still takes the log over are waited out)."""
    victim = next(n for n in cluster.nodes if n.address == before[0]["owner_address"])
    cluster.kill(victim.id)
    survivors = [a for a in cluster.addresses if a != victim.address]

    with Client(survivors, ca=cluster.ca_file) as client:

        def taken_over() -> dict[str, Any] | None:
            try:
                doc = client.describe_topic(topic)
            except MsgStoreError:
                return None
            addresses = {p["owner_address"] for p in doc["partition_offsets"]}
            gone = victim.address not in addresses and not doc["unreachable_nodes"]
            return doc if gone else None

        doc = wait_until(taken_over, 60, f"survivors to lead every partition of {topic}", 0.2)
    return victim, doc
