"""Apache Kafka's Java client against a replicated 3-node cluster (factor 3, minInSync 2):
Kafka's VerifiableProducer (idempotent, acks=all, keys 0..999 so the Java client's murmur2
partitioner spreads records over every partition) writes while the node leading the log of
partition 0 is killed with SIGKILL; every record it was acknowledged is then read back by
Kafka's console consumer, and none twice. The topic is made with Kafka's TopicCommand and the
end offsets read with GetOffsetShell, so every step is Apache Kafka's own tool."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_node.cli.local import LocalCluster
from storage_node.server.routing_state import read_routing_file
from tests.integration.kafka.java import java_argv, kafka_classpath, run_java

TOPIC = "java-verifiable"
MESSAGES = 3000
KILL_AFTER_ACKS = 200  # of partition 0, about a fifth of what it gets


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    kafka_classpath()  # fetch the jars (once) before any node starts
    c = LocalCluster(tmp_path_factory.mktemp("kafka-java"))
    c.up(
        nodes=3,
        replication_factor=3,
        min_in_sync=2,
        env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0", "MSGSTORE_REPLICATION_ACK_TIMEOUT_S": "2"},
    )
    yield c
    c.down()


def bootstrap(cluster: LocalCluster) -> str:
    return ",".join(f"127.0.0.1:{n.kafka_port}" for n in cluster.nodes if cluster.is_running(n))


class Producer:
    """VerifiableProducer in the background; its JSON events read as they come."""

    def __init__(self, workdir: Path, servers: str) -> None:
        config = workdir / "producer.properties"
        config.write_text(
            "enable.idempotence=true\n"
            "acks=all\n"
            "max.in.flight.requests.per.connection=5\n"
            "retries=2147483647\n"
            "request.timeout.ms=5000\n"
            "delivery.timeout.ms=120000\n"
            "retry.backoff.ms=200\n"
            "metadata.max.age.ms=2000\n"
        )
        self.acked: list[tuple[int, int, str]] = []
        self.errors: list[dict] = []
        self.stderr = workdir / "producer.stderr"
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                java_argv(
                    workdir,
                    "org.apache.kafka.tools.VerifiableProducer",
                    "--topic",
                    TOPIC,
                    "--bootstrap-server",
                    servers,
                    "--max-messages",
                    str(MESSAGES),
                    "--throughput",
                    "300",
                    "--acks",
                    "-1",
                    "--repeating-keys",
                    "1000",
                    "--producer.config",
                    str(config),
                ),
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("name") == "producer_send_success":
                self.acked.append((event["partition"], event["offset"], event["value"]))
            elif event.get("name") == "producer_send_error":
                self.errors.append(event)

    def wait_acks(self, partition: int, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while sum(1 for p, _, _ in self.acked if p == partition) < count:
            assert self.proc.poll() is None, self.stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, f"{len(self.acked)} acks after {timeout}s"
            time.sleep(0.05)

    def finish(self, timeout: float = 300) -> None:
        self.proc.wait(timeout)
        self.reader.join(30)


def end_offsets(workdir: Path, servers: str) -> dict[int, int]:
    out = run_java(
        workdir,
        "org.apache.kafka.tools.GetOffsetShell",
        "--bootstrap-server",
        servers,
        "--topic",
        TOPIC,
        "--time",
        "-1",
    )
    ends = {}
    for line in out.split():
        _, partition, offset = line.rsplit(":", 2)
        ends[int(partition)] = int(offset)
    return ends


def test_idempotent_producer_through_a_leader_kill(cluster: LocalCluster, tmp_path: Path):
    servers = bootstrap(cluster)
    run_java(
        tmp_path,
        "org.apache.kafka.tools.TopicCommand",
        "--bootstrap-server",
        servers,
        "--create",
        "--topic",
        TOPIC,
        "--partitions",
        "3",
    )
    table = read_routing_file(cluster.routing_file)
    log_id = table.topics[TOPIC].owners[0]
    victim = str(table.logs[log_id].leader)

    producer = Producer(tmp_path, servers)
    producer.wait_acks(partition=0, count=KILL_AFTER_ACKS)
    acked_before_kill = len(producer.acked)
    cluster.kill(victim)
    producer.finish()
    assert producer.proc.returncode == 0, producer.stderr.read_text()[-3000:]
    new_leader = read_routing_file(cluster.routing_file).logs[log_id].leader
    assert new_leader != victim  # the log failed over while the producer wrote

    live = bootstrap(cluster)
    ends = end_offsets(tmp_path, live)
    stored = sum(ends.values())
    out = run_java(
        tmp_path,
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        live,
        "--topic",
        TOPIC,
        "--from-beginning",
        "--max-messages",
        str(stored),
        "--timeout-ms",
        "120000",
        "--group",
        "java-verifier",
    )
    consumed = Counter(out.split())
    acked = {value for _, _, value in producer.acked}
    lost = acked - set(consumed)
    twice = {value: n for value, n in consumed.items() if n > 1}
    report = {
        "sent": MESSAGES,
        "acked": len(acked),
        "acked_before_kill": acked_before_kill,
        "send_errors": len(producer.errors),
        "stored": stored,
        "consumed": sum(consumed.values()),
        "lost": len(lost),
        "duplicates": len(twice),
        "killed": victim,
        "new_leader": str(new_leader),
    }
    print("java_client_failover", json.dumps(report))
    assert not lost, (sorted(lost, key=int)[:20], report)
    assert not twice, (dict(list(twice.items())[:20]), report)
    assert len(acked) + len(producer.errors) == MESSAGES, report
