"""DeleteGroups and OffsetDelete against a real node: what they delete is what `msgstore
group` and the HTTP API see; a group with a live member is refused as Kafka refuses it."""

from __future__ import annotations

import time

import pytest
import requests
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)

from tests.integration.kafka.conftest import KafkaNode, topic_name
from tests.integration.kafka.test_group_errors import call


def commit_http(node: KafkaNode, group: str, topic: str, partition: int, offset: int) -> None:
    body = {"topic": topic, "partition": partition, "offset": offset}
    r = requests.post(node.url(f"/v1/consumer-groups/{group}/offsets"), json=body, timeout=10)
    assert r.status_code == 200, r.text


def offsets(node: KafkaNode, group: str) -> dict:
    r = requests.get(node.url(f"/v1/consumer-groups/{group}/offsets"), timeout=10)
    r.raise_for_status()
    return r.json()["offsets"]


def groups(node: KafkaNode) -> list[str]:
    return requests.get(node.url("/v1/consumer-groups"), timeout=10).json()["groups"]


def delete_groups(node: KafkaNode, names: list[str]) -> dict[str, KafkaError | None]:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    out: dict[str, KafkaError | None] = {}
    for name, future in admin.delete_consumer_groups(names, request_timeout=30).items():
        try:
            future.result()
            out[name] = None
        except Exception as exc:  # noqa: BLE001 - the KafkaException carries the code
            out[name] = exc.args[0]
    return out


def offset_delete(node: KafkaNode, group: str, topic: str, partitions: list[int]):
    parts = tuple(OffsetDeleteRequestPartition(partition_index=p) for p in partitions)
    return call(
        node,
        OffsetDeleteRequest(
            group_id=group, topics=(OffsetDeleteRequestTopic(name=topic, partitions=parts),)
        ),
    )


def test_delete_groups_forgets_offsets_and_refuses_live_and_unknown_groups(
    kafka_node: KafkaNode, request
):
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=2)
    idle, live = f"{topic}-idle", f"{topic}-live"
    commit_http(kafka_node, idle, topic, 0, 0)
    commit_http(kafka_node, idle, topic, 1, 0)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_node.bootstrap,
            "group.id": live,
            "session.timeout.ms": 6000,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.5)
        assert consumer.assignment(), "the member never got its partitions"
        got = delete_groups(kafka_node, [idle, live, f"{topic}-nobody"])
        assert got[idle] is None
        assert got[live] is not None and got[live].code() == KafkaError.NON_EMPTY_GROUP
        assert got[f"{topic}-nobody"].code() == KafkaError.GROUP_ID_NOT_FOUND
        assert offsets(kafka_node, idle) == {}
        assert idle not in groups(kafka_node)
        # a member subscribed to the topic keeps its offsets of it
        answer = offset_delete(kafka_node, live, topic, [0])
        codes = [p.error_code for t in answer.topics for p in t.partitions]
        assert answer.error_code == ErrorCode.none
        assert codes == [ErrorCode.group_subscribed_to_topic]
    finally:
        consumer.close()


def test_offset_delete_forgets_one_partition_of_an_empty_group(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=3)
    group = f"{topic}-g"
    for p in range(3):
        commit_http(kafka_node, group, topic, p, 0)
    answer = offset_delete(kafka_node, group, topic, [1, 7])
    assert answer.error_code == ErrorCode.none
    codes = {p.partition_index: p.error_code for t in answer.topics for p in t.partitions}
    assert codes == {1: ErrorCode.none, 7: ErrorCode.unknown_topic_or_partition}
    assert offsets(kafka_node, group) == {topic: {"0": 0, "2": 0}}
    missing = offset_delete(kafka_node, f"{topic}-nobody", topic, [0])
    assert missing.error_code == ErrorCode.group_id_not_found


@pytest.mark.parametrize("query", ["", "?topic=no-such-topic", "?partition=1"])
def test_http_delete_of_group_offsets(kafka_node: KafkaNode, request, query: str):
    topic = topic_name(request)[:60]
    kafka_node.create_topic(topic, partitions=2)
    group = f"{topic}-g"
    commit_http(kafka_node, group, topic, 0, 0)
    r = requests.delete(kafka_node.url(f"/v1/consumer-groups/{group}/offsets{query}"), timeout=10)
    if query:
        assert r.status_code in (400, 404), r.text  # refused: nothing deleted
        assert offsets(kafka_node, group) == {topic: {"0": 0}}
    else:
        assert r.status_code == 200 and r.json()["deleted"] is True
        assert offsets(kafka_node, group) == {}
