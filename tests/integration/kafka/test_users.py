"""Users of the access file against a real node with real Kafka clients over SASL/PLAIN
(username: the user's name, password: its token): confluent-kafka and kcat produce where the
user's rules allow and are refused elsewhere, a reader user's consumer group works and it
cannot produce, and revoking a user (the file rewritten, generation + 1) refuses its new
connections and closes its open ones at their next request."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from storage_node.access.access_file import read_access_file, write_access_file
from storage_node.access.document import Operation
from tests.integration.kafka.acl_support import (
    GROUP,
    TOPIC,
    committed,
    create_topic,
    document,
    rule,
    start_node,
    topics,
)
from tests.integration.kafka.conftest import KafkaNode, kcat_path
from tests.integration.kafka.wire import Wire
from tests.waiting import wait_until

USERS = {name: f"{name}-{uuid.uuid4().hex}" for name in ("orders-app", "orders-reader", "temp-app")}
RULES = (
    rule("orders-app", Operation.WRITE, TOPIC, "orders-"),
    rule("orders-reader", Operation.READ, TOPIC, "orders-"),
    rule("orders-reader", Operation.READ, GROUP, "orders-"),
    rule("temp-app", Operation.WRITE, TOPIC, "orders-"),
)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaNode]:
    n = start_node(tmp_path_factory.mktemp("kafka-users"), USERS, RULES)
    for topic in ("orders-eu", "orders-us", "payments"):
        create_topic(n, topic, partitions=2)
    yield n
    n.stop()


def sasl(user: str, password: str | None = None) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": password if password is not None else USERS[user],
    }


def held(node: KafkaNode, topic: str) -> int:
    return sum(nxt - first for first, nxt in topics(node, topic)[topic])


def deliver(producer: Producer, topic: str, n: int) -> list[str]:
    """Produce ``n`` messages and wait for every delivery report; the reports' error names
    ("ok" for a delivered message: a KafkaError must not be compared with None, which leaves
    a TypeError pending in confluent-kafka 2.16)."""
    reports: list[Any] = []
    for i in range(n):
        producer.produce(topic, f"v{i}".encode(), f"k{i}".encode(),
                         on_delivery=lambda err, _msg: reports.append(err))  # fmt: skip
    producer.flush(60)
    assert len(reports) == n
    return ["ok" if e is None else e.name() for e in reports]


def test_a_user_with_write_on_a_prefix_produces_there_and_is_refused_elsewhere(node: KafkaNode):
    before = held(node, "orders-eu")
    producer = Producer({
        "bootstrap.servers": node.bootstrap, **sasl("orders-app"),
        "enable.idempotence": True, "acks": "all", "message.timeout.ms": 30000,
    })  # fmt: skip
    assert deliver(producer, "orders-eu", 20) == ["ok"] * 20  # idempotent: InitProducerId too
    assert held(node, "orders-eu") == before + 20
    refused = deliver(producer, "payments", 3)
    assert set(refused) == {"TOPIC_AUTHORIZATION_FAILED"}
    assert held(node, "payments") == 0


def test_a_wrong_username_for_a_users_token_is_refused(node: KafkaNode):
    errors: list[KafkaError] = []
    consumer = Consumer({
        "bootstrap.servers": node.bootstrap, "group.id": "orders-x", "error_cb": errors.append,
        **sasl("orders-reader", USERS["orders-app"]),
    })  # fmt: skip
    try:
        consumer.subscribe(["orders-eu"])
        wait_until(lambda: (consumer.poll(0.2), errors)[1], 60, "an authentication error")
    finally:
        consumer.close()
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert "is not the name of the token's user" in node.log.read_text()


def test_a_reader_users_consumer_group_works_and_it_cannot_produce(node: KafkaNode):
    writer = Producer({"bootstrap.servers": node.bootstrap, **sasl("orders-app")})
    assert deliver(writer, "orders-us", 30) == ["ok"] * 30
    consumer = Consumer({
        "bootstrap.servers": node.bootstrap, **sasl("orders-reader"),
        "group.id": "orders-readers", "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })  # fmt: skip
    got: list[bytes] = []
    try:
        consumer.subscribe(["orders-us"])

        def read_all() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
            return len(got) >= 30

        wait_until(read_all, 120, "the reader's group to consume 30 messages")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(30))
    offsets = committed(node, "orders-readers")["orders-us"]
    assert sum(int(o) for o in offsets.values()) == 30

    before = held(node, "orders-us")
    reader = Producer({"bootstrap.servers": node.bootstrap, **sasl("orders-reader"),
                       "message.timeout.ms": 30000})  # fmt: skip
    refused = deliver(reader, "orders-us", 2)
    assert set(refused) == {"TOPIC_AUTHORIZATION_FAILED"}
    assert held(node, "orders-us") == before


def kcat(node: KafkaNode, user: str, *args: str, input: bytes | None = None):
    auth = [f"-Xsasl.username={user}", f"-Xsasl.password={USERS[user]}",
            "-Xsecurity.protocol=SASL_PLAINTEXT", "-Xsasl.mechanisms=PLAIN"]  # fmt: skip
    return subprocess.run([kcat_path(), "-b", node.bootstrap, "-m", "15", *auth, *args],
                          input=input, capture_output=True, timeout=90)  # fmt: skip


def test_kcat_with_a_users_sasl_credentials(node: KafkaNode):
    listed = kcat(node, "orders-app", "-L")
    assert listed.returncode == 0, listed.stderr
    assert b'topic "orders-eu"' in listed.stdout and b'topic "orders-us"' in listed.stdout
    assert b"payments" not in listed.stdout  # not describable: left out of the listing
    before = held(node, "orders-eu")
    out = kcat(node, "orders-app", "-P", "-t", "orders-eu", "-K", "=", input=b"a=1\nb=2\n")
    assert out.returncode == 0, out.stderr
    assert held(node, "orders-eu") == before + 2
    out = kcat(node, "orders-app", "-P", "-t", "payments", "-K", "=", input=b"c=3\n")
    assert out.returncode != 0 and b"Topic authorization failed" in out.stderr, out.stderr
    assert held(node, "payments") == 0
    read = kcat(node, "orders-reader", "-C", "-t", "orders-eu", "-o", "beginning", "-e", "-q")
    assert read.returncode == 0, read.stderr
    assert len(read.stdout.splitlines()) == before + 2


def test_a_writer_may_not_read(node: KafkaNode):
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": node.bootstrap, **sasl("orders-app"),
                         "group.id": "unused", "enable.auto.commit": False})  # fmt: skip
    seen: list[Any] = []
    try:
        consumer.assign([TopicPartition("orders-eu", 0, 0)])  # no group: a plain fetch

        def refused() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None:
                seen.append(msg.error().name() if msg.error() else msg.value())
            return "TOPIC_AUTHORIZATION_FAILED" in seen

        wait_until(refused, 60, "the fetch to be refused")
    finally:
        consumer.close()
    assert all(isinstance(x, str) for x in seen), "a record reached a writer"


def login_fails(node: KafkaNode, user: str) -> bool:
    from kio.schema.errors import ErrorCode
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    wire = Wire(node.kafka_port)
    try:
        wire.call(SaslHandshakeRequest(mechanism="PLAIN"))
        answer = wire.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{USERS[user]}".encode()))
        return bool(answer.error_code == ErrorCode.sasl_authentication_failed)
    finally:
        wire.close()


def test_revoking_a_user_refuses_new_connections_and_closes_open_ones(
    node: KafkaNode, tmp_path: Path
):
    errors: list[KafkaError] = []
    producer = Producer({
        "bootstrap.servers": node.bootstrap, **sasl("temp-app"), "error_cb": errors.append,
        "message.timeout.ms": 15000, "retries": 0,
    })  # fmt: skip
    assert deliver(producer, "orders-eu", 5) == ["ok"] * 5  # connected and writing
    access = Path(node.env["MSGSTORE_ACCESS_FILE"])
    current = read_access_file(access)
    users = {u: t for u, t in USERS.items() if u != "temp-app"}
    rules = tuple(r for r in current.acls if r.user != "temp-app")
    write_access_file(access, document(current.generation + 1, users, rules))

    # new connections: authentication fails once the node has read the file
    wait_until(lambda: login_fails(node, "temp-app"), 30, "temp-app's login to be refused")
    out = kcat(node, "temp-app", "-L")
    assert out.returncode != 0 and b"SASL authentication error" in out.stderr, out.stderr

    # the open connection: closed at its next request, and its reconnect is refused
    before = held(node, "orders-eu")
    refused = deliver(producer, "orders-eu", 3)
    assert "ok" not in refused, "a revoked user's message was acknowledged"
    assert held(node, "orders-eu") == before
    wait_until(
        lambda: (producer.poll(0.2), any(e.code() == KafkaError._AUTHENTICATION for e in errors))[
            1
        ],
        60,
        "the producer to report the failed re-authentication",
    )
    log = node.log.read_text()
    assert "user temp-app was removed or its token changed" in log
    # the others are untouched
    assert not login_fails(node, "orders-app")


def refusals(node: KafkaNode, principal: str, resource: str) -> int:
    """How many denials of ``principal`` on ``resource`` the node logged."""
    lines = [json.loads(x) for x in node.log.read_text().splitlines() if x.startswith("{")]
    return sum(1 for x in lines if (x.get("principal"), x.get("resource")) == (principal, resource))


def java_config(path: Path, user: str) -> Path:
    """The Java client's SASL/PLAIN settings of docs/KAFKA.md, for ``user``."""
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{USERS[user]}";\n'
    )
    return path


def test_the_java_client_with_a_users_sasl_settings(node: KafkaNode, tmp_path: Path):
    """Apache Kafka's console producer and consumer (4.1.1) with the documented Java
    settings: the writer produces to its topic and is refused elsewhere; the reader user
    consumes them in a group."""
    from tests.integration.kafka.java import java_argv, run_java

    writer = java_config(tmp_path / "writer.properties", "orders-app")
    reader = java_config(tmp_path / "reader.properties", "orders-reader")
    before = held(node, "orders-us")
    lines = "".join(f"java-{i}\n" for i in range(10))

    def console_producer(topic: str, text: str) -> subprocess.CompletedProcess[str]:
        argv = java_argv(tmp_path, "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server",
                         node.bootstrap, "--topic", topic, "--producer.config", str(writer))  # fmt: skip
        return subprocess.run(argv, input=text, capture_output=True, text=True, timeout=300)

    done = console_producer("orders-us", lines)
    assert done.returncode == 0, done.stderr[-3000:]
    assert held(node, "orders-us") == before + 10
    denials = refusals(node, "orders-app", "topic:payments")
    console_producer("payments", "no\n")  # its error goes to the tool's (silent) logger
    assert refusals(node, "orders-app", "topic:payments") > denials
    assert held(node, "payments") == 0
    out = run_java(tmp_path, "org.apache.kafka.tools.consumer.ConsoleConsumer",
                   "--bootstrap-server", node.bootstrap, "--topic", "orders-us",
                   "--from-beginning", "--max-messages", str(before + 10),
                   "--timeout-ms", "120000", "--group", "orders-java",
                   "--consumer.config", str(reader))  # fmt: skip
    got = out.split()
    assert sorted(v for v in got if v.startswith("java-")) == sorted(lines.split())
    assert sum(int(o) for o in committed(node, "orders-java")["orders-us"].values()) >= 10
