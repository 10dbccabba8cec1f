"""Kafka consumer groups against a real node on loopback, with real clients: confluent-kafka
consumers joining and leaving one group (rebalances; with a synchronous commit after every
message, nothing is lost or read twice), kcat's balanced consumer (-G), and the group seen
and moved by ``msgstore group describe`` / ``group reset`` (one namespace of groups)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.integration.kafka.conftest import KafkaNode, kcat, topic_name


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")


def produce(node: KafkaNode, topic: str, values: list[bytes]) -> None:
    """Over the HTTP API, spread over the partitions (no keys)."""
    body = {"messages": [{"value": v.decode()} for v in values]}
    r = requests.post(node.url(f"/v1/topics/{topic}/messages"), json=body, timeout=30)
    assert r.status_code == 200, r.text


def msgstore(node: KafkaNode, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "storage_node.cli", *args, "--endpoint", node.address],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def describe(node: KafkaNode, group: str) -> dict[int, dict[str, Any]]:
    doc = json.loads(msgstore(node, "group", "describe", group, "--json"))
    return {row["partition"]: row for row in doc["partitions"]}


class Member:
    """One confluent-kafka consumer of the group: what it was assigned and what it read."""

    def __init__(self, node: KafkaNode, group: str, topic: str, name: str) -> None:
        self.name = name
        self.assigned: set[int] = set()
        self.read: list[bytes] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": node.bootstrap,
                "group.id": group,
                "client.id": name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300,
                "partition.assignment.strategy": "range",
            }
        )
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.assigned = {p.partition for p in parts}

    def _on_revoke(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.assigned = set()

    def poll(self) -> None:
        """One poll; a message read is committed (synchronously) before the next poll, the
        only place a rebalance can happen."""
        msg: Message | None = self.consumer.poll(0.1)
        if msg is None:
            return
        error = msg.error()
        if error is not None:
            assert error.code() == KafkaError._PARTITION_EOF, error
            return
        self.read.append(msg.value() or b"")
        self.consumer.commit(message=msg, asynchronous=False)


def poll_until(members: list[Member], what: str, cond: Callable[[], bool]) -> None:
    def step() -> bool:
        for m in members:
            m.poll()
        return cond()

    wait_for(what, step, timeout=90)


def test_two_consumers_join_and_leave_a_group_nothing_lost_or_read_twice(
    kafka_node: KafkaNode, request: pytest.FixtureRequest
) -> None:
    topic, group = topic_name(request), "two-members"
    kafka_node.create_topic(topic, partitions=4)
    values = [f"m-{i}".encode() for i in range(400)]
    produce(kafka_node, topic, values)
    a = Member(kafka_node, group, topic, "member-a")
    poll_until([a], "a alone holds all partitions and reads", lambda: len(a.read) >= 50)
    assert a.assigned == {0, 1, 2, 3}

    b = Member(kafka_node, group, topic, "member-b")
    poll_until(
        [a, b],
        "a rebalance that splits the partitions, then b reads",
        lambda: len(b.assigned) == 2 and len(a.assigned) == 2 and len(b.read) >= 10,
    )
    assert a.assigned.isdisjoint(b.assigned)

    b.consumer.close()  # LeaveGroup: a takes every partition back at once
    poll_until([a], "a holds all partitions again", lambda: a.assigned == {0, 1, 2, 3})
    poll_until([a], "every message read", lambda: len(a.read) + len(b.read) >= len(values))
    for _ in range(20):  # nothing more arrives
        a.poll()
    a.consumer.close()

    everything = a.read + b.read
    assert sorted(everything) == sorted(values), "a message was lost or read twice"
    rows = describe(kafka_node, group)
    assert {p: (r["committed"], r["lag"]) for p, r in rows.items()} == {
        p: (n, 0) for p, (_first, n) in enumerate(kafka_node.offsets(topic))
    }


def test_kcat_balanced_consumer_commits_where_msgstore_group_sees_it(
    kafka_node: KafkaNode, request: pytest.FixtureRequest
) -> None:
    topic, group = topic_name(request), "kcat-group"
    kafka_node.create_topic(topic, partitions=2)
    produce(kafka_node, topic, [f"k-{i}".encode() for i in range(30)])
    out = kcat(kafka_node, "-G", group, "-o", "beginning", "-e", "-f", "%s\n", topic)
    assert sorted(out.stdout.split()) == sorted(f"k-{i}".encode() for i in range(30))
    rows = describe(kafka_node, group)
    assert sum(r["committed"] for r in rows.values()) == 30
    assert [r["lag"] for r in rows.values()] == [0, 0]

    produce(kafka_node, topic, [b"late-1", b"late-2", b"late-3"])
    assert sum(r["lag"] for r in describe(kafka_node, group).values()) == 3
    out = kcat(kafka_node, "-G", group, "-e", "-f", "%s\n", topic)
    assert sorted(out.stdout.split()) == [b"late-1", b"late-2", b"late-3"]

    # msgstore moves the Kafka group: the next kcat run reads everything again
    msgstore(kafka_node, "group", "reset", group, "--topic", topic, "--to-earliest")
    assert sum(r["lag"] for r in describe(kafka_node, group).values()) == 33
    out = kcat(kafka_node, "-G", group, "-e", "-f", "%s\n", topic)
    assert len(out.stdout.split()) == 33


def test_groups_listed_and_described_by_the_admin_client(
    kafka_node: KafkaNode, request: pytest.FixtureRequest
) -> None:
    topic, group = topic_name(request), "admin-seen"
    kafka_node.create_topic(topic, partitions=2)
    produce(kafka_node, topic, [b"x"])
    member = Member(kafka_node, group, topic, "admin-member")
    poll_until([member], "the member reads", lambda: len(member.read) == 1)
    admin = AdminClient({"bootstrap.servers": kafka_node.bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups().result().valid}
    assert listed[group].state.name == "STABLE"
    desc = admin.describe_consumer_groups([group])[group].result()
    assert desc.state.name == "STABLE" and desc.partition_assignor == "range"
    (m,) = desc.members
    assert m.client_id == "admin-member"
    assert {tp.partition for tp in m.assignment.topic_partitions} == {0, 1}
    member.consumer.close()
    desc = admin.describe_consumer_groups([group])[group].result()
    assert desc.state.name == "EMPTY" and desc.members == []
    # committed offsets are the store's: the admin client reads the same ones
    (answer,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    committed = {tp.partition: tp.offset for tp in answer.result().topic_partitions}
    rows = describe(kafka_node, group)
    assert committed == {p: r["committed"] for p, r in rows.items() if r["committed"] is not None}
