"""Fixtures for the Kafka listener's tests: a real `msgstore serve` with its Kafka port on
loopback, and real Kafka clients (kcat, confluent-kafka) pointed at it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import requests

from storage_node.cli.local import free_port
from tests.integration.node.conftest import NodeProcess


class KafkaNode(NodeProcess):
    """A node process serving Kafka on ``kafka_port`` besides HTTP."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.kafka_port = free_port(taken={self.port})
        self.args += ["--kafka-port", str(self.kafka_port)]
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"

    def wait_ready(self, timeout: float = 180.0) -> None:  # as NodeProcess: a loaded machine
        super().wait_ready(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.kafka_port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"the Kafka port never opened:\n{self.log.read_text()}")

    def create_topic(self, name: str, partitions: int = 1) -> None:
        r = requests.post(
            self.address + "/v1/topics", json={"name": name, "partitions": partitions}, timeout=10
        )
        assert r.status_code in (200, 201), r.text

    def offsets(self, topic: str) -> list[list[int]]:
        r = requests.get(self.address + f"/v1/topics/{topic}", timeout=10)
        r.raise_for_status()
        doc = r.json()
        return [[p["first_offset"], p["next_offset"]] for p in doc["partition_offsets"]]


@pytest.fixture(scope="module")
def kafka_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaNode]:
    node = KafkaNode(tmp_path_factory.mktemp("kafka-node"), {"MSGSTORE_MAX_MESSAGE_BYTES": "65536"})
    node.start()
    yield node
    node.stop()


def kcat_path() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: run scripts/setup-system.sh (Debian package kcat)")
    return path


def kcat(
    node: KafkaNode, *args: str, input: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    """Run kcat against the node; fails the test with kcat's stderr when it fails."""
    result = subprocess.run(
        [kcat_path(), "-b", node.bootstrap, *args],
        input=input,
        capture_output=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result


def topic_name(request: pytest.FixtureRequest) -> str:
    return "k-" + "".join(c if c.isalnum() else "-" for c in request.node.name)[:150]
