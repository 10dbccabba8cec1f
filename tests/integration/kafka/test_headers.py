"""Record headers through the Kafka listener and the HTTP API: stored byte for byte (order,
repeated names and null values kept), returned by Fetch after the message's own headers'
``msgstore.msg_id`` / ``msgstore.tag``, and the same headers over HTTP (JSON and binary) and
the Python client, in both directions."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import requests
from confluent_kafka import Consumer, Producer, TopicPartition

from storage_node.client import Client
from storage_node.wire.read_answer import decode_read_answer
from tests.integration.kafka.conftest import KafkaNode, kcat, topic_name

MSGSTORE_HEADERS = ("msgstore.msg_id", "msgstore.tag")


def consume_all(node: KafkaNode, topic: str, want: int) -> list:
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "headers-assign-only"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list = []
        while len(got) < want:
            msg = c.poll(30.0)
            assert msg is not None, f"only {len(got)} of {want} records came back"
            assert msg.error() is None, msg.error()
            got.append(msg)
        return got
    finally:
        c.close()


def own(headers: list | None) -> list:
    """A fetched record's headers without the ones msgstore adds."""
    return [(k, v) for k, v in headers or [] if k not in MSGSTORE_HEADERS]


def test_kcat_headers_from_a_file_read_back_byte_exact(
    kafka_node: KafkaNode, request, tmp_path: Path
):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    sent = [f"key-{i}\tvalue é {i}".encode() for i in range(30)]
    source = tmp_path / "in.txt"
    source.write_bytes(b"\n".join(sent) + b"\n")
    flags = ["-H", "trace=abc", "-H", "dup=1", "-H", "dup=2", "-H", "utf=é€", "-H", "empty="]
    kcat(kafka_node, "-P", "-t", topic, "-K", "\t", "-l", str(source), *flags)
    out = kcat(kafka_node, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-J").stdout
    docs = [json.loads(line) for line in out.splitlines()]
    assert [f"{d['key']}\t{d['payload']}".encode() for d in docs] == sent
    expect = ["trace", "abc", "dup", "1", "dup", "2", "utf", "é€", "empty", ""]
    for d in docs:
        assert d["headers"][: len(expect)] == expect
        assert d["headers"][len(expect) :][0] == "msgstore.msg_id"
    # the same headers over HTTP (every value is text: the "headers" shape)
    page = requests.get(kafka_node.url(f"/v1/topics/{topic}/partitions/0/messages"), timeout=10)
    first = page.json()["messages"][0]
    assert first["headers"] == [list(p) for p in zip(expect[::2], expect[1::2], strict=True)]


def test_confluent_headers_round_trip_binary_duplicates_and_nulls(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    sent = [
        [("bin", bytes(range(256))), ("dup", b"a"), ("dup", b"b"), ("null", None)],
        [],
        [("only", b"")],
        [("dup", b"x"), ("other", b"\xfe"), ("dup", b"x")],
    ]
    producer = Producer({"bootstrap.servers": kafka_node.bootstrap, "enable.idempotence": True})
    for i, headers in enumerate(sent):
        producer.produce(topic, value=b"v%d" % i, key=b"k%d" % i, headers=headers, partition=0)
    assert producer.flush(60) == 0
    got = consume_all(kafka_node, topic, len(sent))
    assert [own(m.headers()) for m in got] == sent
    assert all(m.headers()[len(h)][0] == "msgstore.msg_id" for m, h in zip(got, sent, strict=True))
    # HTTP: a binary value makes the message's headers base64 (the values' rule)
    url = kafka_node.url(f"/v1/topics/{topic}/partitions/0/messages")
    messages = requests.get(url, timeout=10).json()["messages"]
    assert messages[0]["headers_base64"][0] == ["bin", base64.b64encode(bytes(range(256))).decode()]
    assert messages[0]["headers_base64"][3] == ["null", None]
    assert "headers" not in messages[1] and "headers_base64" not in messages[1]
    assert messages[2]["headers"] == [["only", ""]]
    # the Python client: JSON answers as the API gives them, binary ones as bytes pairs
    with Client([kafka_node.address]) as client:
        rows = client.read_columns(topic, 0, 0).to_rows(topic)
        assert [r.get("headers", []) for r in rows] == sent
        by_id = client.get_message(messages[3]["msg_id"])
        assert by_id["headers_base64"] == [
            ["dup", "eA=="],
            ["other", "/g=="],
            ["dup", "eA=="],
        ]
        found = client.lookup_key_columns(topic, "k0").to_rows(topic)
        assert found[0]["headers"] == sent[0]
        fetched = client.fetch(topic, {0: 0}).pages[0].header_lists()
        assert [list(h) for h in fetched] == sent
    # a binary reader that does not ask for headers (one written before them, as the Spark
    # JVM reader) gets the layout it knows
    plain = requests.get(url, headers={"Accept": "application/x-msgstore-batch"}, timeout=10)
    assert decode_read_answer(plain.content).header_lengths is None


def test_http_headers_are_consumed_over_kafka(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    body = {
        "messages": [
            {"value": "json", "tag": "blue", "headers": [["a", "1"], ["a", None], ["b", "é"]]},
            {"value": "b64", "headers_base64": [["raw", base64.b64encode(b"\xff\x00").decode()]]},
        ]
    }
    r = requests.post(kafka_node.url(f"/v1/topics/{topic}/messages"), json=body, timeout=10)
    assert r.status_code == 200, r.text
    with Client([kafka_node.address]) as client:  # the binary batch framing
        client.produce(
            topic,
            [
                {"value": b"client-1", "headers": [("x", b"\x01\x02"), ("x", None)]},
                {"value": b"client-2"},
            ],
        )
    got = consume_all(kafka_node, topic, 4)
    assert [own(m.headers()) for m in got] == [
        [("a", b"1"), ("a", None), ("b", "é".encode())],
        [("raw", b"\xff\x00")],
        [("x", b"\x01\x02"), ("x", None)],
        [],
    ]
    assert ("msgstore.tag", b"blue") in got[0].headers()


def test_malformed_headers_over_http_are_refused_and_store_nothing(kafka_node: KafkaNode, request):
    topic = topic_name(request)
    kafka_node.create_topic(topic)
    url = kafka_node.url(f"/v1/topics/{topic}/messages")
    for bad in (
        {"value": "x", "headers": [["a"]]},
        {"value": "x", "headers": [["a", 1]]},
        {"value": "x", "headers_base64": [["a", "not base64!"]]},
        {"value": "x", "headers": [["a", "1"]], "headers_base64": []},
        {"value": "x", "headers": [["big", "x" * 70_000]]},
    ):
        r = requests.post(url, json={"messages": [bad]}, timeout=10)
        assert r.status_code == 400, (bad, r.text)
    assert kafka_node.offsets(topic) == [[0, 0]]
