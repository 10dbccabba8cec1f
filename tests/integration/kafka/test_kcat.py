"""kcat (librdkafka) against a node's Kafka listener: metadata, produce from a file, read
back byte for byte, and the records seen through msgstore's own API."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
import requests

from tests.integration.kafka.conftest import KafkaNode, kcat, topic_name


def lines(seed: int, count: int) -> list[bytes]:
    """``key<TAB>value`` lines: UTF-8 keys, values of any byte but tab and newline."""
    rnd = random.Random(seed)
    allowed = [b for b in range(256) if b not in (9, 10)]
    out = []
    for i in range(count):
        value = bytes(rnd.choice(allowed) for _ in range(rnd.randint(1, 300)))
        out.append(f"key-{i}-é".encode() + b"\t" + value)
    return out


def test_metadata_lists_the_broker_and_the_topic(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=3)
    doc = json.loads(kcat(kafka_node, "-L", "-J", "-t", topic).stdout)
    assert [(b["id"], b["name"]) for b in doc["brokers"]] == [(0, f"{kafka_node.bootstrap}")]
    (t,) = doc["topics"]
    assert t["topic"] == topic
    assert [p["partition"] for p in t["partitions"]] == [0, 1, 2]
    assert {p["leader"] for p in t["partitions"]} == {0}


def test_produce_from_a_file_and_read_back_byte_exact(
    kafka_node: KafkaNode, request, tmp_path: Path
):
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=2)
    sent = lines(1, 200)
    source = tmp_path / "in.txt"
    source.write_bytes(b"\n".join(sent) + b"\n")
    kcat(kafka_node, "-P", "-t", topic, "-K", "\t", "-l", str(source))
    out = kcat(
        kafka_node, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k\t%s\n"
    ).stdout
    got = out.split(b"\n")[:-1]
    assert sorted(got) == sorted(sent)
    offsets = kafka_node.offsets(topic)
    assert sum(nxt - first for first, nxt in offsets) == 200


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_stored_uncompressed_per_record(
    kafka_node: KafkaNode, request, codec: str
):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    sent = lines(2, 50)
    kcat(kafka_node, "-P", "-t", topic, "-K", "\t", "-z", codec, input=b"\n".join(sent) + b"\n")
    out = kcat(
        kafka_node, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k\t%s\n"
    ).stdout
    assert out.split(b"\n")[:-1] == sent  # one partition: in order


def test_a_kcat_record_is_found_by_key_and_id_through_http(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=2)
    kcat(kafka_node, "-P", "-t", topic, "-K", ":", input=b"order-17:paid \xe2\x82\xac 12\n")
    found = requests.get(kafka_node.url(f"/v1/topics/{topic}/keys/order-17"), timeout=10).json()
    (message,) = found["messages"]
    assert message["value"] == "paid € 12"
    by_id = requests.get(kafka_node.url(f"/v1/messages/{message['msg_id']}"), timeout=10)
    assert by_id.json()["key"] == "order-17"
    # the consumer sees the message ID as a header
    out = kcat(kafka_node, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%h\n").stdout
    assert f"msgstore.msg_id={message['msg_id']}".encode() in out


def test_an_http_record_is_consumed_by_kcat(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    body = {"messages": [{"key": "k1", "value": "from http", "tag": "blue"}]}
    r = requests.post(kafka_node.url(f"/v1/topics/{topic}/messages"), json=body, timeout=10)
    assert r.status_code == 200, r.text
    out = kcat(
        kafka_node, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k|%s|%h\n"
    ).stdout.decode()
    key, value, headers = out.strip().split("|")
    assert (key, value) == ("k1", "from http")
    assert "msgstore.tag=blue" in headers.split(",")


def test_unknown_topic_is_refused_and_creates_nothing(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    result = subprocess.run(
        # librdkafka takes an unknown topic for one not yet propagated for this long (30 s
        # by default) before it reports it
        ["kcat", "-b", kafka_node.bootstrap, "-P", "-t", topic, "-m", "5"]
        + ["-X", "topic.metadata.propagation.max.ms=2000"],
        input=b"x\n",
        capture_output=True,
        timeout=60,
    )
    assert b"Unknown topic or partition" in result.stderr
    assert requests.get(kafka_node.url(f"/v1/topics/{topic}"), timeout=10).status_code == 404


def test_the_kafka_address_follows_the_advertised_http_host(tmp_path):
    """A node advertising another name than its listen address (a pod listening on every
    address and known by its DNS name) gives Kafka clients that name with its Kafka port."""
    node = KafkaNode(tmp_path / "named", args=["--advertise-address", "http://localhost:1"])
    node.start()
    try:
        doc = json.loads(kcat(node, "-L", "-J").stdout)
        assert [b["name"] for b in doc["brokers"]] == [f"localhost:{node.kafka_port}"]
    finally:
        node.stop()


def kafka_requests_timed(node: KafkaNode) -> dict[str, float]:
    """How many Kafka produce and fetch requests the node's histograms hold."""
    from prometheus_client.parser import text_string_to_metric_families

    page = requests.get(node.address + "/metrics", timeout=10)
    page.raise_for_status()
    out = {}
    for family in text_string_to_metric_families(page.text):
        for sample in family.samples:
            if sample.name in ("msgstore_produce_seconds_count", "msgstore_fetch_seconds_count"):
                if sample.labels == {"protocol": "kafka"}:
                    out[sample.name.split("_")[1]] = sample.value
    return out


def test_kafka_requests_land_in_the_produce_and_fetch_histograms(kafka_node: KafkaNode, request):
    """The dashboards' produce and fetch latency panels show Kafka clients beside HTTP ones
    (docs/OPERATIONS.md): each Produce and Fetch request is one observation."""
    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=1)
    before = kafka_requests_timed(kafka_node)
    kcat(kafka_node, "-P", "-t", topic, input=b"one\ntwo\n")
    kcat(kafka_node, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    after = kafka_requests_timed(kafka_node)
    assert after["produce"] >= before["produce"] + 1, (before, after)
    assert after["fetch"] >= before["fetch"] + 1, (before, after)


def test_a_topic_of_the_most_partitions_takes_a_record_in_its_last_one(
    kafka_node: KafkaNode, request
):
    """A topic of MAX_PARTITIONS (more than Kafka users often run): Metadata lists them all
    and the last one stores and serves a record; one more partition is refused."""
    from storage_node.formats.limits import MAX_PARTITIONS

    topic = topic_name(request)
    kafka_node.create_topic(topic, partitions=MAX_PARTITIONS)
    (t,) = json.loads(kcat(kafka_node, "-L", "-J", "-t", topic).stdout)["topics"]
    assert [p["partition"] for p in t["partitions"]] == list(range(MAX_PARTITIONS))
    last = str(MAX_PARTITIONS - 1)
    kcat(kafka_node, "-P", "-t", topic, "-p", last, "-k", "k", input=b"at the end\n")
    out = kcat(
        kafka_node, "-C", "-t", topic, "-p", last, "-o", "beginning", "-e", "-q", "-f", "%p %k %s"
    ).stdout
    assert out == f"{last} k at the end".encode()
    r = requests.post(
        kafka_node.address + "/v1/topics",
        json={"name": topic + "-over", "partitions": MAX_PARTITIONS + 1},
        timeout=10,
    )
    assert r.status_code == 400 and str(MAX_PARTITIONS) in r.text, r.text
