"""A local 3-node cluster with replicated logs (factor 3, minInSync 2): Metadata gives each
partition its log's leader, replicas and epoch; acks=all waits for the in-sync replicas
(NOT_ENOUGH_REPLICAS_AFTER_APPEND when the followers are gone: nothing is acknowledged that
they lack, and the producer's retry is stored once) while
acks=1 is answered by the leader alone."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import pytest
import requests
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from storage_node.cli.local import LocalCluster
from storage_node.server.routing_state import read_routing_file
from tests.integration.kafka.wire import Wire, record_batch

TOPIC = "events"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("kafka-replicated"))
    c.up(
        nodes=3,
        replication_factor=3,
        min_in_sync=2,
        env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0", "MSGSTORE_REPLICATION_ACK_TIMEOUT_S": "2"},
    )
    r = requests.post(
        c.addresses[0] + "/v1/topics", json={"name": TOPIC, "partitions": 3}, timeout=30
    )
    assert r.status_code in (200, 201), r.text
    yield c
    c.down()


def produce(port: int, partition: int, acks: int, value: bytes):
    wire = Wire(port)
    try:
        request = ProduceRequest(
            acks=acks,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                TopicProduceData(
                    name=TOPIC,
                    partition_data=(
                        PartitionProduceData(
                            index=partition, records=bytes(record_batch([(b"k", value)]))
                        ),
                    ),
                ),
            ),
        )
        (answer,) = wire.call(request).responses[0].partition_responses
        return answer
    finally:
        wire.close()


def metadata_topic(cluster: LocalCluster):  # noqa: ANN201 - kio's MetadataResponseTopic
    wire = Wire(cluster.nodes[0].kafka_port)
    try:
        answer = wire.call(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    finally:
        wire.close()
    (topic,) = answer.topics
    return topic


def test_metadata_names_log_leaders_replicas_and_epochs(cluster: LocalCluster):
    # a cluster just started may still move a log's lead (a follower slow to join on a busy
    # machine bumps its epoch): compare the answer with the routing table of the same moment,
    # the table read again after the answer until both agree (bounded)
    deadline = time.monotonic() + 30
    while True:
        topic = metadata_topic(cluster)
        table = read_routing_file(cluster.routing_file)
        logs = [table.logs[table.topics[TOPIC].owners[p.partition_index]] for p in topic.partitions]
        settled = all(
            p.leader_epoch == log.epoch for p, log in zip(topic.partitions, logs, strict=True)
        )
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    index = {n.id: i for i, n in enumerate(table.nodes)}
    for part, log in zip(topic.partitions, logs, strict=True):
        assert part.leader_id == index[log.leader]
        assert part.leader_epoch == log.epoch >= 1
        assert list(part.replica_nodes) == [index[r] for r in log.replicas]


def test_acks_all_waits_for_the_in_sync_replicas(cluster: LocalCluster):
    table = read_routing_file(cluster.routing_file)
    owners = table.topics[TOPIC].owners
    partition = next(p for p, o in enumerate(owners) if table.logs[o].leader == "node-0")
    port = cluster.nodes[0].kafka_port
    # the node learns its log's leader and the followers catch up after the cluster starts:
    # wait for the first acknowledged write (bounded by a deadline; a try refused for too
    # few replicas is stored on the leader only, one before the leader is named, or before
    # the node took up the routing table that names it, not at all)
    codes = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        codes.append(produce(port, partition, -1, b"with replicas").error_code)
        if codes[-1] == ErrorCode.none:
            break
        if codes[-1] in (ErrorCode.leader_not_available, ErrorCode.not_leader_or_follower):
            time.sleep(0.05)
    assert codes[-1] == ErrorCode.none, codes
    assert set(codes) <= {
        ErrorCode.none,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.leader_not_available,
        ErrorCode.not_leader_or_follower,
    }
    cluster.stop("node-1")
    cluster.stop("node-2")
    refused = produce(port, partition, -1, b"alone")
    assert refused.error_code == ErrorCode.not_enough_replicas_after_append, refused
    assert produce(port, partition, 1, b"leader only").error_code == ErrorCode.none
