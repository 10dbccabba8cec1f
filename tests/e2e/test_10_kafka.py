"""Kafka on the kind cluster (docs/KAFKA.md, "Kubernetes"): a client pod runs kcat against the
store's Service and sees every broker at its per-pod name, produces and reads back byte for
byte; a client on this machine reaches the nodes' external listeners through their NodePorts
(kind-config.yaml maps 30092-30095 to 127.0.0.1) and reads and writes on every node.

The store is the sample one (TLS and a token on): the Kafka listeners speak SASL_SSL with the
store's CA and the token as the PLAIN password; the NetworkPolicy is enforced (the cluster
runs kube-network-policies) and admits the labelled kcat pod and the external port.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from e2e_support import REPO, Shop, restricted_security
from fixtures_kind import app_version

KCAT_POD = "kcat"
TOPIC = "kafka-e2e"


def broker_count(shop: Shop) -> int:
    """The store's nodes: 3, or 4 once test_06 has scaled it up (its scale-down is refused)."""
    count = int(shop.get("statefulset", shop.store)["spec"]["replicas"])
    assert count in (3, 4) and len(shop.node_pods()) == count, count
    return count


def kcat_pod_manifest(shop: Shop, name: str, labels: dict[str, str], image: str) -> dict[str, Any]:
    """Debian's kcat in a pod that passes Pod Security restricted, with the store's CA and
    token (the SASL password)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": shop.namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "kcat",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                    "env": [
                        {
                            "name": "TOKEN",
                            "valueFrom": {
                                "secretKeyRef": {"name": f"{shop.store}-token", "key": "token"}
                            },
                        }
                    ],
                    "securityContext": restricted_security(10001),
                    "volumeMounts": [{"name": "ca", "mountPath": "/ca"}],
                }
            ],
            "volumes": [{"name": "ca", "configMap": {"name": f"{shop.store}-ca"}}],
        },
    }


@pytest.fixture(scope="module")
def kcat_pod(shop: Shop) -> Iterator[str]:
    """msgstore-kcat (scripts/build-images.sh kcat) loaded on the workers, one labelled pod."""
    built = subprocess.run(
        ["bash", str(REPO / "scripts" / "build-images.sh"), "kcat"],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]
    image = built.stdout.strip().splitlines()[-1]
    assert image == f"msgstore-kcat:{app_version()}"
    shop.cluster.kind(
        "load", "docker-image", "--name", shop.cluster.name, image,
        "--nodes", ",".join(shop.cluster.worker_names),
    )  # fmt: skip
    labels = {"msgstore.io/client": shop.store}
    manifest = kcat_pod_manifest(shop, KCAT_POD, labels, image)
    shop.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    shop.kubectl("wait", "--for=condition=Ready", f"pod/{KCAT_POD}", "--timeout=180s", timeout=200)
    # an operator-managed store's topics are declared in its spec (the nodes' routing table
    # is the operator's ConfigMap): add the topic there and wait until every node serves it
    patch = [{"op": "add", "path": "/spec/topics/-", "value": {"name": TOPIC, "partitions": 6}}]
    shop.kubectl("patch", "messagestore", shop.store, "--type=json", "-p", json.dumps(patch))
    shop.cluster.wait_until(
        lambda: (lambda t: t if t and all(TOPIC in d["topics"] for d in t.values()) else None)(
            shop.workload("cluster")
        ),
        f"every node serving topic {TOPIC}",
        180,
        2,
    )
    yield KCAT_POD
    shop.kubectl("delete", "pod", KCAT_POD, "--wait=false", check=False)


def kcat(shop: Shop, pod: str, *args: str, input: str | None = None) -> str:
    """kcat in the pod, bootstrapped at the store's client Service, over SASL_SSL."""
    settings = (
        f"-b {shop.store}.{shop.namespace}.svc:9092 -X security.protocol=SASL_SSL "
        "-X ssl.ca.location=/ca/ca.crt -X sasl.mechanisms=PLAIN -X sasl.username=kcat "
        '-X sasl.password="$TOKEN"'
    )
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in args)
    got = shop.kubectl(
        "exec", "-i", pod, "--", "sh", "-c", f"kcat {settings} {quoted}", input=input, timeout=180
    )
    return got.stdout


def test_kcat_in_a_pod_lists_every_broker_at_its_per_pod_name(shop: Shop, kcat_pod: str) -> None:
    count = broker_count(shop)
    doc = json.loads(kcat(shop, kcat_pod, "-L", "-J", "-t", TOPIC))
    brokers = {b["id"]: b["name"] for b in doc["brokers"]}
    assert brokers == {
        i: f"{shop.store}-{i}.{shop.store}-nodes.{shop.namespace}.svc.cluster.local:9092"
        for i in range(count)
    }
    (topic,) = doc["topics"]
    leaders = {p["leader"] for p in topic["partitions"]}
    # a new topic spreads over every node first (operator/msgstore_operator/assignment.py)
    assert len(topic["partitions"]) == 6 and leaders == set(range(count)), topic


def test_kcat_produces_and_reads_back_byte_exact(shop: Shop, kcat_pod: str) -> None:
    # keys and values with spaces, colons, quotes and non-ASCII text; one line per record
    records = [(f"key-{i:04d}", f"value {i}: \"q\" 'x' é ✓ {'z' * (i % 50)}") for i in range(300)]
    lines = "".join(f"{k}\t{v}\n" for k, v in records)
    kcat(shop, kcat_pod, "-P", "-t", TOPIC, "-K", "\t", input=lines)
    got = kcat(shop, kcat_pod, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-f", "%k\t%s\n")
    assert sorted(got.splitlines()) == sorted(lines.splitlines())


def test_a_client_on_this_machine_uses_the_external_listeners(shop: Shop, kcat_pod: str) -> None:
    token = shop.kubectl(
        "get", "secret", f"{shop.store}-token", "-o", "jsonpath={.data.token}"
    ).stdout
    settings = {
        "bootstrap.servers": "127.0.0.1:30092",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(shop.ca_file()),
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "host",
        "sasl.password": base64.b64decode(token).decode(),
    }
    producer = Producer({**settings, "enable.idempotence": True, "acks": "all"})
    brokers = producer.list_topics(TOPIC, timeout=60).brokers
    assert {b.id: f"{b.host}:{b.port}" for b in brokers.values()} == {
        i: f"127.0.0.1:{30092 + i}" for i in range(broker_count(shop))
    }
    errors: list[Any] = []
    sent = {f"host-{i}".encode(): bytes(range(i % 256)) + b"\x00\xff" for i in range(120)}
    for i, (key, value) in enumerate(sent.items()):
        producer.produce(
            TOPIC, key=key, value=value, partition=i % 6, on_delivery=lambda e, _m: errors.append(e)
        )
    assert producer.flush(120) == 0
    assert errors == [None] * len(sent)
    consumer = Consumer({**settings, "group.id": "e2e-external", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    got: dict[bytes, bytes] = {}
    try:
        shop.cluster.wait_until(
            lambda: _poll_into(consumer, got) and sent.items() <= got.items(),
            "every record produced from this machine read back through the NodePorts",
            180,
            0,
        )
    finally:
        consumer.close()


def _poll_into(consumer: Consumer, got: dict[bytes, bytes]) -> bool:
    msg = consumer.poll(2.0)
    if msg is not None and msg.error() is None:
        key = msg.key()
        if key is not None and key.startswith(b"host-"):
            got[key] = msg.value() or b""
    return True
