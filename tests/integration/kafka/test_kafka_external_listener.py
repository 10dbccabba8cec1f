"""Two listeners per node, as on Kubernetes (docs/KAFKA.md, "Kubernetes"): the internal one
advertises each node's ``kafka_address``, the external one (``MSGSTORE_KAFKA_EXTERNAL_PORT``)
each node's ``kafka_external_address`` from the routing table, so a client that can reach
only the external addresses (outside the cluster, through NodePorts) follows them to every
broker. Two real nodes on loopback: the internal addresses are named ``localhost``, the
external ones ``127.0.0.1``, so the answers show which listener gave them."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_node.cli.local import free_port
from tests.integration.kafka.conftest import KafkaNode, kcat_path

TOPIC = "edge"


def _routing(nodes: list[KafkaNode], external: list[int]) -> dict:
    return {
        "format": 1,
        "generation": 1,
        "managed_by": "operator",
        "nodes": [
            {
                "id": f"node-{i}",
                "address": n.address,
                "kafka_address": f"localhost:{n.kafka_port}",
                "kafka_external_address": f"127.0.0.1:{external[i]}",
            }
            for i, n in enumerate(nodes)
        ],
        "topics": {
            TOPIC: {
                "partitions": 4,
                "compression": "lz4",
                "retention_hours": 24.0,
                "owners": ["node-0", "node-1", "node-0", "node-1"],
            }
        },
    }


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[KafkaNode], list[int]]]:
    base = tmp_path_factory.mktemp("kafka-external")
    routing = base / "routing.json"
    nodes = [KafkaNode(base / f"node-{i}") for i in range(2)]
    taken = {p for n in nodes for p in (n.port, n.kafka_port)}
    external: list[int] = []
    for _ in nodes:
        external.append(free_port(taken=taken | set(external)))
    routing.write_text(json.dumps(_routing(nodes, external)))
    for i, n in enumerate(nodes):
        n.args += ["--node-id", f"node-{i}", "--routing-file", str(routing)]
        n.env["MSGSTORE_KAFKA_EXTERNAL_PORT"] = str(external[i])
        n.env["MSGSTORE_KAFKA_ADVERTISE"] = f"localhost:{n.kafka_port}"  # as the operator sets
        n.start(wait=False)
    for n in nodes:
        n.wait_ready(timeout=240)  # importing the protocol schemas is slow on a busy machine
    yield nodes, external
    for n in nodes:
        n.stop()


def _kcat(bootstrap: str, *args: str, input: bytes | None = None) -> bytes:
    proc = subprocess.run(
        [kcat_path(), "-b", bootstrap, *args], input=input, capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout


def test_each_listener_advertises_its_own_addresses(pair: tuple[list[KafkaNode], list[int]]):
    nodes, external = pair
    inside = json.loads(_kcat(f"127.0.0.1:{nodes[1].kafka_port}", "-L", "-J"))
    outside = json.loads(_kcat(f"127.0.0.1:{external[1]}", "-L", "-J"))
    assert {b["id"]: b["name"] for b in inside["brokers"]} == {
        i: f"localhost:{n.kafka_port}" for i, n in enumerate(nodes)
    }
    assert {b["id"]: b["name"] for b in outside["brokers"]} == {
        i: f"127.0.0.1:{p}" for i, p in enumerate(external)
    }


def test_a_client_of_the_external_listener_produces_and_consumes_on_every_node(
    pair: tuple[list[KafkaNode], list[int]], tmp_path: Path
):
    nodes, external = pair
    bootstrap = f"127.0.0.1:{external[0]}"
    lines = [f"k{i}:value-{i}" for i in range(40)]
    for p in range(4):  # every partition, so both nodes' listeners take writes
        chunk = "".join(f"{line}\n" for line in lines[p::4]).encode()
        _kcat(bootstrap, "-P", "-t", TOPIC, "-p", str(p), "-K:", input=chunk)
    got = _kcat(bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-f", "%k:%s\n")
    assert sorted(got.decode().splitlines()) == sorted(lines)
    assert all(sum(n.offsets(TOPIC)[p][1] for n in nodes) for p in range(4))


def test_an_external_port_without_the_kafka_listener_is_refused(tmp_path: Path):
    node = KafkaNode(tmp_path / "n")
    node.args = [a for a in node.args if a not in ("--kafka-port", str(node.kafka_port))]
    node.env["MSGSTORE_KAFKA_EXTERNAL_PORT"] = str(node.kafka_port)
    with pytest.raises(RuntimeError, match="needs the Kafka listener"):
        node.start()
