"""Kafka groups on a 3-node local cluster: every node names the same coordinator, the
others answer NOT_COORDINATOR, offsets of partitions served by other nodes are committed
where those partitions live (``msgstore group describe`` sees them all), and a coordinator
restart loses only its in-memory membership: the member joins again and reads on from its
committed offsets, nothing lost or read twice."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.join_group.v3 import request as join_v3

from storage_node.cli.local import LocalCluster
from tests.integration.kafka.group_members import Member, describe, poll_until, produce
from tests.integration.kafka.wire import Wire

GROUPS = [f"cluster-group-{i}" for i in range(12)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(Path(tmp_path_factory.mktemp("kafka-cluster")))
    c.up(nodes=3, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0"})
    yield c
    c.down()


def call(port: int, request: Any) -> Any:
    wire = Wire(port)
    try:
        return wire.call(request)
    finally:
        wire.close()


def coordinators(cluster: LocalCluster, port: int) -> dict[str, int]:
    """FindCoordinator answers of one node: group -> coordinator's Kafka port."""
    out = {}
    for group in GROUPS:
        answer = call(port, FindCoordinatorRequest(key=group, key_type=0))
        assert answer.error_code == ErrorCode.none
        out[group] = answer.port
    return out


def bootstrap(cluster: LocalCluster) -> str:
    return ",".join(f"127.0.0.1:{n.kafka_port}" for n in cluster.nodes)


def produce_everywhere(cluster: LocalCluster, topic: str, values: list[bytes]) -> None:
    """A share of the messages through each node: each stores them in partitions it serves,
    so every node holds some of the group's partitions."""
    for i, node in enumerate(cluster.nodes):
        produce(node.address, topic, values[i :: len(cluster.nodes)])


def make_topic(cluster: LocalCluster, name: str, partitions: int) -> None:
    r = requests.post(
        cluster.nodes[0].address + "/v1/topics",
        json={"name": name, "partitions": partitions},
        timeout=30,
    )
    assert r.status_code in (200, 201), r.text
    owners = set(r.json()["owners"])
    assert len(owners) == 3, owners  # the partitions live on every node


def test_every_node_names_the_same_coordinator_and_the_others_refuse(
    cluster: LocalCluster,
) -> None:
    answers = [coordinators(cluster, n.kafka_port) for n in cluster.nodes]
    assert answers[0] == answers[1] == answers[2]
    ports = {n.kafka_port for n in cluster.nodes}
    assert set(answers[0].values()) == ports  # groups spread over the nodes
    group = GROUPS[0]
    elsewhere = next(p for p in ports if p != answers[0][group])
    protocol = join_v3.JoinGroupRequestProtocol(name="range", metadata=b"")
    join = join_v3.JoinGroupRequest(
        group_id=group, session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
        protocol_type="consumer", protocols=(protocol,),
    )  # fmt: skip
    assert call(elsewhere, join).error_code == ErrorCode.not_coordinator


def test_commits_reach_every_node_and_survive_a_coordinator_restart(
    cluster: LocalCluster,
) -> None:
    topic, group = "cluster-groups", GROUPS[1]
    make_topic(cluster, topic, 6)
    endpoint = cluster.nodes[0].address
    first = [f"a-{i}".encode() for i in range(120)]
    produce_everywhere(cluster, topic, first)
    member = Member(bootstrap(cluster), group, topic, "cluster-member")
    poll_until([member], "every message read", lambda: len(member.read) == len(first))
    rows = describe(endpoint, group)
    assert len(rows) == 6
    assert {p: (r["committed"], r["lag"]) for p, r in rows.items()} == {
        p: (r["next_offset"], 0) for p, r in rows.items()
    }
    assert all(r["committed"] > 0 for r in rows.values())

    coordinator_port = coordinators(cluster, cluster.nodes[0].kafka_port)[group]
    node = next(n for n in cluster.nodes if n.kafka_port == coordinator_port)
    before = member.consumer.memberid()
    cluster.restart(node.id, stop_first=True)  # the group's membership is gone with it
    second = [f"b-{i}".encode() for i in range(60)]
    produce_everywhere(cluster, topic, second)
    poll_until(
        [member],
        "the member rejoined and read the new messages",
        lambda: len(member.read) == len(first) + len(second),
    )
    for _ in range(20):
        member.poll()
    assert member.consumer.memberid() != before  # it joined again as a new member
    member.consumer.close()
    assert sorted(member.read) == sorted(first + second), "a message was lost or read twice"
    assert all(r["lag"] == 0 for r in describe(endpoint, group).values())
