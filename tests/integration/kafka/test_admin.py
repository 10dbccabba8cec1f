"""Topic administration and cluster description over Kafka (confluent-kafka's AdminClient
and exact requests): the same topics the HTTP API sees."""

from __future__ import annotations

import datetime

import pytest
import requests
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from kio.schema.create_topics.v5.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)

from tests.integration.kafka.conftest import KafkaNode, kcat, topic_name
from tests.integration.kafka.wire import Wire


def admin(node: KafkaNode) -> AdminClient:
    return AdminClient({"bootstrap.servers": node.bootstrap})


def outcome(future) -> str:
    try:
        future.result(30)
        return "ok"
    except KafkaException as exc:
        return exc.args[0].name()


def test_create_grow_describe_and_delete_topics(kafka_node: KafkaNode, request):
    base = topic_name(request)
    a = admin(kafka_node)
    made = a.create_topics(
        [
            NewTopic(base + "-a", 3),
            NewTopic(base + "-b", 2, config={"retention.ms": "7200000"}),
            NewTopic(base + "-c", 1, config={"cleanup.policy": "compact"}),
        ]
    )
    assert outcome(made[base + "-a"]) == "ok"
    assert outcome(made[base + "-b"]) == "ok"
    assert outcome(made[base + "-c"]) == "INVALID_CONFIG"
    doc = requests.get(kafka_node.url(f"/v1/topics/{base}-b"), timeout=10).json()
    assert (doc["partitions"], doc["retention_hours"]) == (2, 2.0)
    assert requests.get(kafka_node.url(f"/v1/topics/{base}-c"), timeout=10).status_code == 404
    again = a.create_topics([NewTopic(base + "-b", 2)])
    assert outcome(again[base + "-b"]) == "TOPIC_ALREADY_EXISTS"

    grown = a.create_partitions([NewPartitions(base + "-b", 5), NewPartitions(base + "-a", 1)])
    assert outcome(grown[base + "-b"]) == "ok"
    assert outcome(grown[base + "-a"]) == "INVALID_PARTITIONS"
    doc = requests.get(kafka_node.url(f"/v1/topics/{base}-b"), timeout=10).json()
    assert doc["partitions"] == 5

    (configs,) = a.describe_configs([ConfigResource("topic", base + "-b")]).values()
    values = {k: v.value for k, v in configs.result(30).items()}
    assert values["retention.ms"] == "7200000"
    assert values["cleanup.policy"] == "delete"

    gone = a.delete_topics([base + "-b", base + "-none"])
    assert outcome(gone[base + "-b"]) == "ok"
    assert outcome(gone[base + "-none"]) == "UNKNOWN_TOPIC_OR_PART"
    assert requests.get(kafka_node.url(f"/v1/topics/{base}-b"), timeout=10).status_code == 404


def test_describe_cluster_names_this_broker(kafka_node: KafkaNode):
    wire = Wire(kafka_node.kafka_port)
    answer = wire.call(DescribeClusterRequest(include_cluster_authorized_operations=False))
    wire.close()
    assert answer.error_code == ErrorCode.none
    assert [(b.broker_id, b.host, b.port) for b in answer.brokers] == [
        (0, "127.0.0.1", kafka_node.kafka_port)
    ]
    assert answer.controller_id == 0 and answer.cluster_id


@pytest.mark.parametrize(
    ("current", "asked", "expected"),
    [
        (-1, 0, (ErrorCode.none, 0, 3)),  # the current epoch: its end is the next offset
        (-1, 7, (ErrorCode.none, -1, -1)),  # another epoch: undefined (docs/KAFKA.md)
        (5, 0, (ErrorCode.unknown_leader_epoch, -1, -1)),  # the client knows a newer one
    ],
)
def test_offset_for_leader_epoch(kafka_node: KafkaNode, request, current, asked, expected):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    kcat(kafka_node, "-P", "-t", topic, input=b"a\nb\nc\n")
    wire = Wire(kafka_node.kafka_port)
    answer = wire.call(
        OffsetForLeaderEpochRequest(
            topics=(
                OffsetForLeaderTopic(
                    topic=topic,
                    partitions=(
                        OffsetForLeaderPartition(
                            partition=0, current_leader_epoch=current, leader_epoch=asked
                        ),
                    ),
                ),
            )
        )
    )
    wire.close()
    (part,) = answer.topics[0].partitions
    assert (part.error_code, part.leader_epoch, part.end_offset) == expected


def test_create_topics_v5_answers_the_topic_configs(kafka_node: KafkaNode, request):
    """A created topic's answer (v5+) lists its configs, never null: Apache Kafka's Java admin
    client (kafka-topics, TopicCommand) reads the list on success and failed on null."""
    base = topic_name(request)
    wire = Wire(kafka_node.kafka_port)
    try:
        answer = wire.call(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name=base + "-a",
                        num_partitions=2,
                        replication_factor=-1,
                        assignments=(),
                        configs=(),
                    ),
                    CreatableTopic(
                        name=base + "-b",
                        num_partitions=1,
                        replication_factor=-1,
                        assignments=(),
                        configs=(CreatableTopicConfig(name="retention.ms", value="7200000"),),
                    ),
                ),
                timeout=datetime.timedelta(seconds=30),
                validate_only=False,
            )
        )
    finally:
        wire.close()
    a, b = answer.topics[0], answer.topics[1]
    assert (a.error_code, b.error_code) == (ErrorCode.none, ErrorCode.none)
    assert a.num_partitions == 2
    configs_a = {c.name: (c.value, c.config_source) for c in a.configs}
    configs_b = {c.name: (c.value, c.config_source) for c in b.configs}
    assert configs_a["retention.ms"] == (str(168 * 3_600_000), 5)  # the default
    assert configs_b["retention.ms"] == ("7200000", 1)  # set for the topic
    assert configs_a["cleanup.policy"] == ("delete", 5)
