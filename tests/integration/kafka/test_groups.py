"""Kafka consumer groups against a real node on loopback, with real clients: confluent-kafka
consumers joining and leaving one group (rebalances; with a synchronous commit after every
message, nothing is lost or read twice), kcat's balanced consumer (-G), and the group seen
and moved by ``msgstore group describe`` / ``group reset`` (one namespace of groups)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from tests.integration.kafka.conftest import KafkaNode, kcat, topic_name
from tests.integration.kafka.group_members import (
    Member,
    describe,
    msgstore,
    poll_until,
    produce,
)


def test_two_consumers_join_and_leave_a_group_nothing_lost_or_read_twice(
    kafka_node: KafkaNode, request: pytest.FixtureRequest
) -> None:
    topic, group = topic_name(request), "two-members"
    kafka_node.create_topic(topic, partitions=4)
    values = [f"m-{i}".encode() for i in range(400)]
    produce(kafka_node.address, topic, values)
    a = Member(kafka_node.bootstrap, group, topic, "member-a")
    poll_until([a], "a alone holds all partitions and reads", lambda: len(a.read) >= 50)
    assert a.assigned == {0, 1, 2, 3}

    b = Member(kafka_node.bootstrap, group, topic, "member-b")
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
    rows = describe(kafka_node.address, group)
    assert {p: (r["committed"], r["lag"]) for p, r in rows.items()} == {
        p: (n, 0) for p, (_first, n) in enumerate(kafka_node.offsets(topic))
    }


def test_kcat_balanced_consumer_commits_where_msgstore_group_sees_it(
    kafka_node: KafkaNode, request: pytest.FixtureRequest
) -> None:
    topic, group = topic_name(request), "kcat-group"
    kafka_node.create_topic(topic, partitions=2)
    produce(kafka_node.address, topic, [f"k-{i}".encode() for i in range(30)])
    out = kcat(kafka_node, "-G", group, "-o", "beginning", "-e", "-f", "%s\n", topic)
    assert sorted(out.stdout.split()) == sorted(f"k-{i}".encode() for i in range(30))
    rows = describe(kafka_node.address, group)
    assert sum(r["committed"] for r in rows.values()) == 30
    assert [r["lag"] for r in rows.values()] == [0, 0]

    produce(kafka_node.address, topic, [b"late-1", b"late-2", b"late-3"])
    assert sum(r["lag"] for r in describe(kafka_node.address, group).values()) == 3
    out = kcat(kafka_node, "-G", group, "-e", "-f", "%s\n", topic)
    assert sorted(out.stdout.split()) == [b"late-1", b"late-2", b"late-3"]

    # msgstore moves the Kafka group: the next kcat run reads everything again
    msgstore(kafka_node.address, "group", "reset", group, "--topic", topic, "--to-earliest")
    assert sum(r["lag"] for r in describe(kafka_node.address, group).values()) == 33
    out = kcat(kafka_node, "-G", group, "-e", "-f", "%s\n", topic)
    assert len(out.stdout.split()) == 33


def test_groups_listed_and_described_by_the_admin_client(
    kafka_node: KafkaNode, request: pytest.FixtureRequest
) -> None:
    topic, group = topic_name(request), "admin-seen"
    kafka_node.create_topic(topic, partitions=2)
    produce(kafka_node.address, topic, [b"x"])
    member = Member(kafka_node.bootstrap, group, topic, "admin-member")
    poll_until([member], "the member reads", lambda: len(member.read) == 1)
    admin = AdminClient({"bootstrap.servers": kafka_node.bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups().result().valid}
    assert listed[group].state.name == "STABLE"
    desc = admin.describe_consumer_groups([group])[group].result()
    assert desc.state.name == "STABLE" and desc.partition_assignor == "range"
    (m,) = desc.members
    assert (m.client_id, m.host) == ("admin-member", "/127.0.0.1")
    assert {tp.partition for tp in m.assignment.topic_partitions} == {0, 1}
    member.consumer.close()
    desc = admin.describe_consumer_groups([group])[group].result()
    assert desc.state.name == "EMPTY" and desc.members == []
    # committed offsets are the store's: the admin client reads the same ones
    (answer,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    committed = {tp.partition: tp.offset for tp in answer.result().topic_partitions}
    rows = describe(kafka_node.address, group)
    assert committed == {p: r["committed"] for p, r in rows.items() if r["committed"] is not None}


CHILD_CONSUMER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
              "partition.assignment.strategy": "range", "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
"""


def test_a_killed_member_expires_after_its_session_and_the_other_takes_over(
    kafka_node: KafkaNode, request: pytest.FixtureRequest
) -> None:
    topic, group = topic_name(request), "killed-member"
    kafka_node.create_topic(topic, partitions=4)
    a = Member(kafka_node.bootstrap, group, topic, "survivor")
    poll_until([a], "a holds every partition", lambda: a.assigned == {0, 1, 2, 3})
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_CONSUMER, kafka_node.bootstrap, group, topic],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        poll_until([a], "the child took half the partitions", lambda: len(a.assigned) == 2)
    finally:
        child.kill()  # no LeaveGroup: only its session timeout can remove it
        child.wait()
    poll_until([a], "a holds every partition again", lambda: a.assigned == {0, 1, 2, 3})
    admin = AdminClient({"bootstrap.servers": kafka_node.bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result()
    assert [m.client_id for m in desc.members] == ["survivor"]
    a.consumer.close()


def test_a_static_member_restarting_gets_its_partitions_back_without_a_rebalance(
    kafka_node: KafkaNode, request: pytest.FixtureRequest
) -> None:
    topic, group = topic_name(request), "static-members"
    kafka_node.create_topic(topic, partitions=4)
    a = Member(kafka_node.bootstrap, group, topic, "static-a", instance_id="pod-a")
    poll_until([a], "a, the first (so the leader), holds everything", lambda: len(a.assigned) == 4)
    b = Member(kafka_node.bootstrap, group, topic, "static-b", instance_id="pod-b")
    poll_until([a, b], "the partitions split", lambda: len(a.assigned) == len(b.assigned) == 2)
    held_by_b, revokes = set(b.assigned), a.revoked
    b.consumer.close()  # a static member sends no LeaveGroup
    again = Member(kafka_node.bootstrap, group, topic, "static-b", instance_id="pod-b")
    poll_until([a, again], "pod-b holds its partitions again", lambda: again.assigned == held_by_b)
    assert a.revoked == revokes  # a kept its partitions throughout: no rebalance
    for m in (a, again):
        m.consumer.close()
