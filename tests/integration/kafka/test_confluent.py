"""confluent-kafka (librdkafka) against a node's Kafka listener: an idempotent producer with
acks=all, a consumer that assigns partitions itself and seeks by timestamp."""

from __future__ import annotations

import time

import requests
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.kafka.conftest import KafkaNode, topic_name


def produce_all(node: KafkaNode, topic: str, records: list[tuple[bytes, bytes]]) -> list:
    """Produce with an idempotent acks=all producer; the delivery reports, in order."""
    producer = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
        }
    )
    reports: list = []

    def delivered(err, msg) -> None:
        reports.append((err, msg.partition(), msg.offset(), msg.key()))

    for key, value in records:
        producer.produce(topic, value=value, key=key, on_delivery=delivered)
    assert producer.flush(60) == 0
    return reports


def consumer(node: KafkaNode) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": "unused-assign-only",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )


def read(c: Consumer, want: int, timeout_s: float = 60) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        msg = c.poll(1.0)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    return got


def test_idempotent_acks_all_produce_stores_each_record_once(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=3)
    records = [(f"user-{i % 7}".encode(), f"event {i}".encode()) for i in range(300)]
    reports = produce_all(kafka_node, topic, records)
    assert [r[0] for r in reports] == [None] * 300
    stored = kafka_node.offsets(topic)
    assert sum(nxt for _first, nxt in stored) == 300
    # every report's (partition, offset) is a distinct stored record
    assert len({(p, o) for _e, p, o, _k in reports}) == 300
    url = kafka_node.url(f"/v1/topics/{topic}/keys/user-3?max=1000")
    found = requests.get(url, timeout=10).json()
    assert len(found["messages"]) == len([r for r in records if r[0] == b"user-3"])


def test_assign_and_seek_by_timestamp(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=1)
    produce_all(kafka_node, topic, [(b"a", b"early-%d" % i) for i in range(20)])
    # a time after every store time of the first batch (acknowledged before now), and the
    # second batch stored after it (store times never go back)
    middle = int(time.time() * 1000) + 1
    while int(time.time() * 1000) <= middle:
        time.sleep(0.001)
    produce_all(kafka_node, topic, [(b"b", b"late-%d" % i) for i in range(10)])
    c = consumer(kafka_node)
    try:
        (found,) = c.offsets_for_times([TopicPartition(topic, 0, middle)], timeout=30)
        assert found.error is None
        assert found.offset == 20
        c.assign([TopicPartition(topic, 0, found.offset)])
        got = read(c, 10)
        assert [m.value() for m in got] == [b"late-%d" % i for i in range(10)]
        assert all(m.timestamp()[1] >= middle - 1000 for m in got)
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        assert (low, high) == (0, 30)
        c.assign([TopicPartition(topic, 0, 0)])
        assert [m.offset() for m in read(c, 30)] == list(range(30))
    finally:
        c.close()


def test_long_poll_answers_when_a_record_arrives(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=1)
    c = Consumer(
        {
            "bootstrap.servers": kafka_node.bootstrap,
            "group.id": "unused-assign-only",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5000,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        assert c.poll(0.5) is None  # nothing yet: the fetch waits at the node
        produce_all(kafka_node, topic, [(b"k", b"v")])
        (msg,) = read(c, 1)
        assert (msg.key(), msg.value(), msg.offset()) == (b"k", b"v", 0)
    finally:
        c.close()
