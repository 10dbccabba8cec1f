"""Reads after a failover, on a local replicated cluster (factor 3, the failover controller):
a partition whose log a surviving node took over is answered from that node's copy of the
log by every read route (the multi-partition fetch behind consumers and the Spark readers,
describe, the single-partition read), every acknowledged message once.

The fetch route and describe once read the node's own store, and answered such a partition
as empty: a consumer then saw none of its messages, with no error."""

from __future__ import annotations

import pytest

from storage_node.cli.local import LocalCluster
from storage_node.client import Client
from tests.integration.node.failover import fail_over

MESSAGES = 3000


@pytest.mark.parametrize("tls", [False, True], ids=["http", "mtls"])
def test_a_log_taken_over_is_served_by_every_read_route(tmp_path, tls: bool) -> None:
    """With ``tls`` the nodes and the controller speak HTTPS with mTLS between them (log
    shipping, fencing and the routing hand-over need their certificates)."""
    cluster = LocalCluster(tmp_path / "c")
    cluster.up(nodes=3, replication_factor=3, tls=tls)
    try:
        cluster.wait_leaders()
        with Client(cluster.addresses, ca=cluster.ca_file) as client:
            client.create_topic("r", 6)
            for i in range(0, MESSAGES, 100):
                client.produce("r", [{"key": f"k{j}", "value": str(j)} for j in range(i, i + 100)])
            before = client.describe_topic("r")["partition_offsets"]
        victim, doc = fail_over(cluster, "r", before)
        survivors = [a for a in cluster.addresses if a != victim.address]
        with Client(survivors, ca=cluster.ca_file) as client:
            offsets = doc["partition_offsets"]
            assert [p["next_offset"] for p in offsets] == [p["next_offset"] for p in before]
            taken = [p["partition"] for p in offsets if p["owner"] == victim.id]
            assert taken  # the victim's log, led by a survivor now
            values: list[int] = []
            with client.consumer("r") as consumer:  # fetch route, binary pages
                for cols in consumer:
                    values += [int(v) for v in cols.value_list()]
            assert sorted(values) == list(range(MESSAGES))
            for p in taken:
                answer = client.read("r", p, offset=0, max_messages=10_000)
                assert len(answer["messages"]) == before[p]["next_offset"]
    finally:
        cluster.down()
