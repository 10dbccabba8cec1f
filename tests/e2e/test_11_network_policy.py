"""The store's NetworkPolicy, enforced: the kind cluster runs kube-network-policies (built from
its Go module, scripts/kind/network-policies.sh), so a pod without the client label cannot open
a connection to a node's HTTP or Kafka port and a pod with it can; a label given or taken
away changes that for the next connection; the nodes reach each other.

Each probe is a TCP connect from inside a pod to a node pod's own IP (no Service, no NAT): a
refused packet is dropped by the enforcer, so the connect times out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from e2e_support import NODE_IMAGE, Shop, restricted_security

PORTS = (8080, 9092)  # HTTP and the in-cluster Kafka listener
PROBE = (
    "import socket, sys\n"
    "for target in sys.argv[1:]:\n"
    "    host, port = target.rsplit(':', 1)\n"
    "    try:\n"
    "        socket.create_connection((host, int(port)), timeout=4).close()\n"
    "        print(target, 'open')\n"
    "    except socket.timeout:\n"
    "        print(target, 'timeout')\n"
    "    except OSError as exc:\n"
    "        print(target, type(exc).__name__)\n"
)


def probe_pod(shop: Shop, name: str, labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": shop.namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "probe",
                    "image": NODE_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                    "securityContext": restricted_security(10001),
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def probes(shop: Shop) -> Iterator[tuple[str, str]]:
    """A pod with the client label and one without, in the store's namespace."""
    labelled = probe_pod(shop, "probe-client", {"msgstore.io/client": shop.store})
    plain = probe_pod(shop, "probe-stranger", {"app": "stranger"})
    for pod in (labelled, plain):
        shop.kubectl("apply", "-f", "-", input=json.dumps(pod))
    for name in ("probe-client", "probe-stranger"):
        shop.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=180s", timeout=200)
    yield "probe-client", "probe-stranger"
    shop.kubectl("delete", "pod", "probe-client", "probe-stranger", "--wait=false", check=False)


def targets(shop: Shop) -> list[str]:
    """Every node pod's IP with each port (the store has 3 nodes, or 4 after test_06's scale-up)."""
    ips = [p["status"]["podIP"] for p in shop.node_pods()]
    assert len(ips) == shop.get("statefulset", shop.store)["spec"]["replicas"] >= 3, ips
    return [f"{ip}:{port}" for ip in ips for port in PORTS]


def probe(shop: Shop, pod: str, where: list[str], container: str | None = None) -> dict[str, str]:
    """{target: "open" | "timeout" | the error's name} from inside ``pod``."""
    extra = ["-c", container] if container else []
    got = shop.kubectl(
        "exec", pod, *extra, "--", "python3", "-c", PROBE, *where, timeout=30 + 6 * len(where)
    )
    return dict(line.rsplit(" ", 1) for line in got.stdout.splitlines())


def test_the_enforcer_runs_on_every_node(shop: Shop) -> None:
    ds = shop.cluster.get_json("-n", "kube-system", "daemonset", "kube-network-policies")
    status = ds["status"]
    assert status["numberReady"] == status["desiredNumberScheduled"] == 3, status


def test_only_a_labelled_pod_reaches_the_nodes_http_and_kafka_ports(
    shop: Shop, probes: tuple[str, str]
) -> None:
    client, stranger = probes
    where = targets(shop)
    assert probe(shop, client, where) == {t: "open" for t in where}
    assert probe(shop, stranger, where) == {t: "timeout" for t in where}


def test_the_nodes_reach_each_other(shop: Shop) -> None:
    pods = shop.node_pods()
    others = [f"{p['status']['podIP']}:{port}" for p in pods[1:] for port in PORTS]
    got = probe(shop, pods[0]["metadata"]["name"], others, container="node")
    assert got == {t: "open" for t in others}


def test_giving_and_taking_the_label_opens_and_closes_the_way(
    shop: Shop, probes: tuple[str, str]
) -> None:
    client, stranger = probes
    where = targets(shop)[:2]  # one node's HTTP and Kafka ports
    label = f"msgstore.io/client={shop.store}"
    shop.kubectl("label", "pod", stranger, label)
    shop.kubectl("label", "pod", client, "msgstore.io/client-")
    try:
        shop.cluster.wait_until(
            lambda: probe(shop, stranger, where) == {t: "open" for t in where},
            "the newly labelled pod to reach the node",
            120,
            1,
        )
        shop.cluster.wait_until(
            lambda: probe(shop, client, where) == {t: "timeout" for t in where},
            "the pod whose label was taken to be refused",
            120,
            1,
        )
    finally:
        shop.kubectl("label", "pod", client, label, "--overwrite", check=False)
        shop.kubectl("label", "pod", stranger, "msgstore.io/client-", check=False)
