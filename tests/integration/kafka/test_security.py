"""SASL and TLS on the Kafka listener, with real clients: a node with a token requires
SASL/PLAIN (the token as password) or OAUTHBEARER; the read token may consume but not
produce; nothing is stored by a connection that did not authenticate; and a `local up --tls
--token` cluster serves SASL_SSL that confluent-kafka verifies against the cluster's CA."""

from __future__ import annotations

import datetime
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from confluent_kafka import Consumer, KafkaException, Producer
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from storage_node.cli.local import LocalCluster
from tests.integration.kafka.conftest import KafkaNode, kcat_path, topic_name
from tests.integration.kafka.wire import Wire, record_batch

TOKEN = "write-" + uuid.uuid4().hex
READ_TOKEN = "read-" + uuid.uuid4().hex
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaNode]:
    n = KafkaNode(
        tmp_path_factory.mktemp("kafka-sasl"),
        {"MSGSTORE_TOKEN": TOKEN, "MSGSTORE_READ_TOKEN": READ_TOKEN},
    )
    n.start()
    yield n
    n.stop()


def create_topic(node: KafkaNode, name: str, partitions: int = 1) -> None:
    r = requests.post(
        node.address + "/v1/topics",
        json={"name": name, "partitions": partitions},
        headers=AUTH,
        timeout=10,
    )
    assert r.status_code in (200, 201), r.text


def stored(node: KafkaNode, topic: str) -> int:
    """How many messages the topic holds, asked over HTTP with the token."""
    r = requests.get(node.address + f"/v1/topics/{topic}", headers=AUTH, timeout=10)
    r.raise_for_status()
    return sum(p["next_offset"] - p["first_offset"] for p in r.json()["partition_offsets"])


def sasl(password: str, mechanism: str = "PLAIN") -> list[str]:
    return [
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        f"sasl.mechanisms={mechanism}",
        "-X",
        "sasl.username=u",
        "-X",
        f"sasl.password={password}",
    ]


def run_kcat(node: KafkaNode, *args: str, input: bytes | None = None):
    return subprocess.run(
        [kcat_path(), "-b", node.bootstrap, "-m", "10", *args],
        input=input,
        capture_output=True,
        timeout=90,
    )


def consume(node: KafkaNode, topic: str, password: str) -> list[bytes]:
    out = run_kcat(
        node, *sasl(password), "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k=%s\n"
    )
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return out.stdout.split(b"\n")[:-1]


def test_kcat_with_the_token_produces_and_consumes(node: KafkaNode, request):
    topic = topic_name(request)
    create_topic(node, topic, partitions=2)
    sent = [f"k{i}=v{i}".encode() for i in range(50)]
    out = run_kcat(node, *sasl(TOKEN), "-P", "-t", topic, "-K", "=", input=b"\n".join(sent))
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    assert stored(node, topic) == 50
    assert sorted(consume(node, topic, TOKEN)) == sorted(sent)


def test_a_wrong_password_is_refused_and_nothing_is_stored(node: KafkaNode, request):
    topic = topic_name(request)
    create_topic(node, topic)
    out = run_kcat(node, *sasl("not-the-token"), "-P", "-t", topic, "-K", "=", input=b"k=v\n")
    assert out.returncode != 0
    assert b"SASL authentication" in out.stderr or b"Authentication failed" in out.stderr
    assert stored(node, topic) == 0
    assert "SASL authentication failed" in node.log.read_text() or "authentication failed" in (
        node.log.read_text()
    )


def test_no_sasl_at_all_is_refused_and_nothing_is_stored(node: KafkaNode, request):
    topic = topic_name(request)
    create_topic(node, topic)
    out = run_kcat(node, "-P", "-t", topic, "-K", "=", input=b"k=v\n")
    assert out.returncode != 0
    assert stored(node, topic) == 0
    assert "before SASL authentication" in node.log.read_text()


def test_the_read_token_consumes_but_cannot_produce(node: KafkaNode, request):
    topic = topic_name(request)
    create_topic(node, topic)
    out = run_kcat(node, *sasl(TOKEN), "-P", "-t", topic, "-K", "=", input=b"a=1\nb=2\n")
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    out = run_kcat(node, *sasl(READ_TOKEN), "-P", "-t", topic, "-K", "=", input=b"c=3\n")
    assert out.returncode != 0
    assert b"Topic authorization failed" in out.stderr, out.stderr
    assert stored(node, topic) == 2
    assert sorted(consume(node, topic, READ_TOKEN)) == [b"a=1", b"b=2"]


def test_oauthbearer_takes_the_token_as_the_bearer_value(node: KafkaNode, request):
    topic = topic_name(request)
    create_topic(node, topic)
    conf = {
        "bootstrap.servers": node.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",
    }
    producer = Producer(
        {**conf, "oauth_cb": lambda _config: (TOKEN, 4102444800.0), "message.timeout.ms": 30000}
    )
    delivered: list[object] = []
    producer.produce(topic, b"v", b"k", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None]
    assert stored(node, topic) == 1


def raw_produce(topic: str) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(
                    PartitionProduceData(index=0, records=bytes(record_batch([(b"k", b"v")]))),
                ),
            ),
        ),
    )


def test_produce_before_authenticating_closes_the_connection(node: KafkaNode, request):
    topic = topic_name(request)
    create_topic(node, topic)
    wire = Wire(node.kafka_port)
    try:
        wire.send_raw(wire.frame(raw_produce(topic)))
        assert wire.read_frame() is None  # closed, no answer
    finally:
        wire.close()
    assert stored(node, topic) == 0


def test_a_wrong_password_gets_sasl_authentication_failed_then_a_closed_connection(
    node: KafkaNode, request
):
    topic = topic_name(request)
    create_topic(node, topic)
    wire = Wire(node.kafka_port)
    try:
        answer = wire.call(SaslHandshakeRequest(mechanism="PLAIN"))
        assert answer.error_code == ErrorCode.none
        answer = wire.call(SaslAuthenticateRequest(auth_bytes=b"\0u\0wrong"))
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        wire.send_raw(wire.frame(raw_produce(topic)))
        assert wire.read_frame() is None
    finally:
        wire.close()
    assert stored(node, topic) == 0


def test_the_read_token_gets_topic_authorization_failed_on_the_wire(node: KafkaNode, request):
    topic = topic_name(request)
    create_topic(node, topic)
    wire = Wire(node.kafka_port)
    try:
        assert wire.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
        answer = wire.call(SaslAuthenticateRequest(auth_bytes=f"\0u\0{READ_TOKEN}".encode()))
        assert answer.error_code == ErrorCode.none
        answer = wire.call(raw_produce(topic))
        (part,) = answer.responses[0].partition_responses
        assert part.error_code == ErrorCode.topic_authorization_failed
    finally:
        wire.close()
    assert stored(node, topic) == 0


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("kafka-tls"))
    c.up(nodes=2, env={"MSGSTORE_TOKEN": TOKEN, "MSGSTORE_LIFECYCLE_INTERVAL_S": "0"}, tls=True)
    yield c
    c.down()


def test_confluent_kafka_sasl_ssl_against_a_tls_token_cluster(tls_cluster: LocalCluster):
    c = tls_cluster
    assert c.ca_file is not None
    ca = str(c.ca_file)
    r = requests.post(
        c.addresses[0] + "/v1/topics",
        json={"name": "secure", "partitions": 4},
        headers=AUTH,
        verify=ca,
        timeout=30,
    )
    assert r.status_code in (200, 201), r.text
    kafka = [c.kafka_address(n) for n in c.nodes]
    assert all(kafka)
    conf = {
        "bootstrap.servers": kafka[0],
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": ca,
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "u",
        "sasl.password": TOKEN,
    }
    producer = Producer({**conf, "acks": "all", "message.timeout.ms": 60000})
    errors: list[object] = []
    for i in range(40):
        producer.produce(
            "secure", f"v{i}".encode(), f"k{i}".encode(), on_delivery=lambda e, m: errors.append(e)
        )
    assert producer.flush(90) == 0
    assert errors == [None] * 40
    consumer = Consumer({**conf, "group.id": "secure-readers", "auto.offset.reset": "earliest"})
    got: list[bytes] = []
    try:
        consumer.subscribe(["secure"])
        for _ in range(600):
            if len(got) >= 40:
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        consumer.commit(asynchronous=False)  # commits go to every partition's leader node
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(40))
    # the coordinator stored the commits of the partitions the other node leads over HTTPS
    # with the token (the node's peer session): every partition's offset is there
    owners = requests.get(
        c.addresses[0] + "/v1/topics/secure", headers=AUTH, verify=ca, timeout=10
    ).json()["owners"]
    assert len(set(owners)) == 2  # partitions on both nodes
    r = requests.get(
        c.addresses[1] + "/v1/consumer-groups/secure-readers/offsets",
        headers=AUTH,
        verify=ca,
        timeout=30,
    )
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["unreachable_nodes"] == []
    committed = {int(p): int(o) for p, o in doc["offsets"]["secure"].items()}
    assert sum(committed.values()) == 40


def test_a_client_without_the_ca_is_refused(tls_cluster: LocalCluster, tmp_path: Path):
    kafka = tls_cluster.kafka_address(tls_cluster.nodes[0])
    assert kafka is not None
    out = subprocess.run(
        [kcat_path(), "-b", kafka, "-m", "10", "-L", "-X", "security.protocol=SASL_SSL"]
        + ["-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=u", "-X", f"sasl.password={TOKEN}"]
        + ["-X", f"ssl.ca.location={tmp_path / 'none.pem'}"],
        capture_output=True,
        timeout=60,
    )
    assert out.returncode != 0


def test_plaintext_to_a_tls_listener_gets_no_answer(tls_cluster: LocalCluster):
    with pytest.raises(KafkaException):
        consumer = Consumer(
            {
                "bootstrap.servers": tls_cluster.kafka_address(tls_cluster.nodes[0]),
                "group.id": "x",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN",
                "sasl.username": "u",
                "sasl.password": TOKEN,
            }
        )
        try:
            consumer.list_topics(timeout=5)
        finally:
            consumer.close()


def test_sasl_handshake_v0_then_the_bare_token(node: KafkaNode, request):
    """SaslHandshake v0 is followed by the bare PLAIN message (no SaslAuthenticate), as
    older clients send it; an empty frame answers it, then requests are served."""
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0

    topic = topic_name(request)
    create_topic(node, topic)
    wire = Wire(node.kafka_port)
    try:
        assert wire.call(HandshakeV0(mechanism="PLAIN")).error_code == ErrorCode.none
        message = f"\0u\0{TOKEN}".encode()
        wire.send_raw(len(message).to_bytes(4, "big") + message)
        assert wire.read_frame() == b""
        (part,) = wire.call(raw_produce(topic)).responses[0].partition_responses
        assert part.error_code == ErrorCode.none
    finally:
        wire.close()
    assert stored(node, topic) == 1
    wire = Wire(node.kafka_port)  # a wrong bare token: closed without an answer
    try:
        assert wire.call(HandshakeV0(mechanism="PLAIN")).error_code == ErrorCode.none
        wire.send_raw(len(b"\0u\0no").to_bytes(4, "big") + b"\0u\0no")
        assert wire.read_frame() is None
    finally:
        wire.close()


def test_an_unknown_mechanism_is_answered_with_the_supported_ones(node: KafkaNode):
    wire = Wire(node.kafka_port)
    try:
        answer = wire.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(answer.mechanisms) == {"PLAIN", "OAUTHBEARER"}
        assert wire.read_frame() is None  # then closed
    finally:
        wire.close()


def test_the_read_token_cannot_change_topics_commit_or_get_a_producer_id(node: KafkaNode, request):
    from confluent_kafka import KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    topic = topic_name(request)
    create_topic(node, topic, partitions=1)
    conf = {
        "bootstrap.servers": node.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "u",
        "sasl.password": READ_TOKEN,
    }
    admin = AdminClient(conf)
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    futures = [
        admin.create_topics([NewTopic(topic + "-new", 1)])[topic + "-new"],
        admin.delete_topics([topic])[topic],
        admin.create_partitions([NewPartitions(topic, 3)])[topic],
    ]
    for future in futures:
        with pytest.raises(KafkaException) as caught:
            future.result(timeout=60)
        assert caught.value.args[0].code() == denied
    r = requests.get(node.address + "/v1/topics", headers=AUTH, timeout=10)
    names = [t["name"] if isinstance(t, dict) else t for t in r.json()["topics"]]
    assert topic in names and topic + "-new" not in names
    r = requests.get(node.address + f"/v1/topics/{topic}", headers=AUTH, timeout=10)
    assert len(r.json()["partition_offsets"]) == 1

    consumer = Consumer({**conf, "group.id": "ro-" + topic, "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as caught:
            consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        assert caught.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    r = requests.get(node.address + f"/v1/consumer-groups/ro-{topic}/offsets", headers=AUTH)
    assert r.status_code == 404 or not r.json().get("offsets"), r.text

    errors: list[KafkaError] = []
    producer = Producer(
        {**conf, "enable.idempotence": True, "error_cb": errors.append, "message.timeout.ms": 20000}
    )
    producer.produce(topic, b"v", b"k")
    try:
        producer.flush(30)
    except KafkaException as exc:  # the fatal error is raised here or given to error_cb
        errors.append(exc.args[0])
    assert any(e.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED for e in errors), errors
    assert stored(node, topic) == 0


def test_local_status_prints_the_kafka_addresses_of_a_tls_token_cluster(
    tls_cluster: LocalCluster,
):
    import sys

    from storage_node.server.routing_state import read_routing_file

    out = subprocess.run(
        [sys.executable, "-m", "storage_node.cli", "local", "status"]
        + ["--data-dir", str(tls_cluster.dir)],
        capture_output=True,
        timeout=60,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    table = read_routing_file(tls_cluster.routing_file)
    for n in tls_cluster.nodes:
        kafka = tls_cluster.kafka_address(n)
        assert kafka is not None
        (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith(n.id + " ")]
        assert kafka in line and "running" in line
        (entry,) = [e for e in table.nodes if e.id == n.id]
        assert entry.kafka_address == kafka


def test_a_large_frame_before_authenticating_closes_the_connection(node: KafkaNode):
    """Before authentication a frame may not exceed 512 KiB (a client without the token
    cannot make the node read MSGSTORE_MAX_BODY_BYTES)."""
    wire = Wire(node.kafka_port)
    try:
        wire.send_raw((1024 * 1024).to_bytes(4, "big"))
        assert wire.read_frame() is None
    finally:
        wire.close()
    assert "(8..524288 allowed)" in node.log.read_text()
