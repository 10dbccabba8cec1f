"""A local 3-node cluster with Kafka listeners (`msgstore local up`): Metadata names every
node at its Kafka address, a client writes to and reads from partitions led by all three,
and a node that does not lead a partition answers NOT_LEADER_OR_FOLLOWER and stores nothing."""

from __future__ import annotations

import datetime
import json
import subprocess
from collections.abc import Iterator

import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from storage_node.cli.local import LocalCluster
from tests.integration.kafka.conftest import kcat_path
from tests.integration.kafka.wire import Wire, record_batch

TOPIC = "orders"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("kafka-cluster"))
    c.up(nodes=3, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0"})
    r = requests.post(
        c.addresses[0] + "/v1/topics", json={"name": TOPIC, "partitions": 6}, timeout=30
    )
    assert r.status_code in (200, 201), r.text
    yield c
    c.down()


def bootstrap(c: LocalCluster, i: int = 0) -> str:
    address = c.kafka_address(c.nodes[i])
    assert address is not None
    return address


def test_metadata_lists_every_node_at_its_kafka_address(cluster: LocalCluster):
    out = subprocess.run(
        [kcat_path(), "-b", bootstrap(cluster, 1), "-L", "-J", "-t", TOPIC],
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    doc = json.loads(out)
    brokers = {b["id"]: b["name"] for b in doc["brokers"]}
    assert brokers == {i: bootstrap(cluster, i) for i in range(3)}
    owners = requests.get(cluster.addresses[0] + f"/v1/topics/{TOPIC}", timeout=10).json()
    leaders = [
        p["leader"] for p in sorted(doc["topics"][0]["partitions"], key=lambda p: p["partition"])
    ]
    assert leaders == [int(o.split("-")[1]) for o in owners["owners"]]


def test_produce_and_consume_across_the_nodes(cluster: LocalCluster):
    producer = Producer(
        {"bootstrap.servers": bootstrap(cluster), "enable.idempotence": True, "acks": "all"}
    )
    errors: list = []
    for i in range(120):
        producer.produce(
            TOPIC,
            key=f"ord-{i}".encode(),
            value=f"v{i}".encode(),
            partition=i % 6,
            on_delivery=lambda err, _m: errors.append(err),
        )
    assert producer.flush(60) == 0
    assert errors == [None] * 120
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(cluster, 2),
            "group.id": "assign-only",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(6)])
        got = {}
        while len(got) < 120:
            msg = consumer.poll(30)
            assert msg is not None and msg.error() is None
            got[msg.key()] = (msg.partition(), msg.value())
    finally:
        consumer.close()
    assert got == {f"ord-{i}".encode(): (i % 6, f"v{i}".encode()) for i in range(120)}


def test_a_node_that_does_not_lead_answers_not_leader(cluster: LocalCluster):
    before = requests.get(cluster.addresses[1] + f"/v1/topics/{TOPIC}", timeout=10).json()
    owners = before["owners"]
    partition = owners.index("node-0")  # led by node-0: ask node-1
    wire = Wire(cluster.nodes[1].kafka_port)
    request = ProduceRequest(
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=TOPIC,
                partition_data=(
                    PartitionProduceData(
                        index=partition, records=bytes(record_batch([(b"k", b"v")]))
                    ),
                ),
            ),
        ),
    )
    (answer,) = wire.call(request).responses[0].partition_responses
    wire.close()
    assert answer.error_code == ErrorCode.not_leader_or_follower
    assert "node-0" in (answer.error_message or "")
    after = requests.get(cluster.addresses[0] + f"/v1/topics/{TOPIC}", timeout=10).json()
    assert after["partition_offsets"][partition] == before["partition_offsets"][partition]
