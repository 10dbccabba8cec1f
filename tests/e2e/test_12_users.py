"""Users and ACLs on the real cluster: MessageStoreUser resources, their Secrets mounted by
client pods, the nodes enforcing the rules the operator wrote, and revocation.

A store of its own (one node, namespace `acl`), so this module runs alone as well as after
the others: `flock /tmp/msgstore-kind.lock pytest tests/e2e/test_12_users.py`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_support import CLIENT_LABEL, client_pod_manifest, pod_ready
from fixtures_kind import NODE_IMAGE, TIMINGS, KindCluster

NAMESPACE = "acl"
STORE = "acl"
REVOCATION_S = 30  # the issue's bound: a deleted user loses access within 30 s

# Runs in a client pod: one call with the pod's token; prints the outcome as JSON.
CALL = """
import json, os, sys
from storage_node.client import Client
from storage_node.errors import MsgStoreError
op, topic, arg = sys.argv[1], sys.argv[2], sys.argv[3]
client = Client(os.environ["MSGSTORE_ENDPOINT"], token=os.environ["MSGSTORE_TOKEN"])
try:
    if op == "produce":
        out = client.produce(topic, [{"key": "k", "value": arg}])
        result = {"ok": True, "offset": out[0]["offset"]}
    else:
        values = [m["value"] for m in client.consume(topic, group=arg)]
        result = {"ok": True, "values": values,
                  "committed": client.committed_offsets(arg, topic).get(topic, {})}
except MsgStoreError as exc:
    result = {"ok": False, "code": exc.code, "status": exc.status, "message": str(exc)}
print(json.dumps(result))
"""


def kubectl(cluster: KindCluster, *args: str, **kw: Any) -> Any:
    return cluster.run_kubectl("-n", NAMESPACE, *args, **kw)


def apply(cluster: KindCluster, obj: dict[str, Any]) -> None:
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(obj))


def user(name: str, acls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "msgstore.io/v1alpha1",
        "kind": "MessageStoreUser",
        "metadata": {"name": name},
        "spec": {"store": STORE, "authentication": {"type": "token"}, "acls": acls},
    }


def rule(op: str, name: str, kind: str = "topic", pattern: str = "prefix") -> dict[str, Any]:
    return {"operation": op, "resource": {"type": kind, "name": name, "patternType": pattern}}


def user_pod(name: str) -> dict[str, Any]:
    """The documented client pod, with the user's token from its own Secret."""
    pod = client_pod_manifest(NAMESPACE, STORE, name=f"{name}-client")
    (container,) = pod["spec"]["containers"]
    for env in container["env"]:
        if env["name"] == "MSGSTORE_TOKEN":
            env["valueFrom"] = {"secretKeyRef": {"name": name, "key": "token"}}
    assert pod["metadata"]["labels"] == {CLIENT_LABEL[0]: STORE}
    return pod


def call(cluster: KindCluster, pod: str, op: str, topic: str, arg: str) -> dict[str, Any]:
    got = kubectl(cluster, "exec", pod, "--", "python3", "-c", CALL, op, topic, arg, timeout=120)
    return dict(json.loads(got.stdout.strip().splitlines()[-1]))


def mounted_document(cluster: KindCluster) -> str:
    """The access document as the node pod sees it, read inside the pod."""
    path = "/etc/msgstore/access/access.json"
    return str(kubectl(cluster, "exec", f"{STORE}-0", "--", "cat", path, timeout=60).stdout)


@pytest.fixture(scope="module")
def acl_store(kind_cluster: KindCluster, operator_release: str) -> Iterator[KindCluster]:
    cluster = kind_cluster
    cluster.run_kubectl("create", "namespace", NAMESPACE)
    cluster.wait_until(
        lambda: kubectl(cluster, "get", "sa", "default", check=False).returncode == 0,
        "the namespace's default ServiceAccount",
    )
    store = {
        "apiVersion": "msgstore.io/v1alpha1",
        "kind": "MessageStore",
        "metadata": {"name": STORE},
        "spec": {
            "replicas": 1,
            "image": NODE_IMAGE,
            "storage": {"size": "1Gi"},
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
            "topics": [{"name": "orders-eu", "partitions": 1}, {"name": "payments"}],
        },
    }
    apply(cluster, store)
    apply(cluster, user("orders-writer", [rule("write", "orders-")]))
    apply(
        cluster,
        user("orders-reader", [rule("read", "orders-"), rule("read", "orders-reader-", "group")]),
    )
    for name in ("orders-writer", "orders-reader"):
        cluster.wait_until(
            lambda n=name: kubectl(cluster, "get", "secret", n, check=False).returncode == 0,
            f"Secret {name}",
            180,
            1,
        )
        apply(cluster, user_pod(name))
    for pod in ("orders-writer-client", "orders-reader-client", f"{STORE}-0"):
        cluster.wait_until(
            lambda p=pod: pod_ready(cluster.get_json("-n", NAMESPACE, "pod", p)),
            f"pod {pod} Ready",
            420,
            2,
        )
    yield cluster
    cluster.run_kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def test_a_prefix_writer_produces_to_its_topics_only(acl_store: KindCluster) -> None:
    cluster = acl_store
    wrote = call(cluster, "orders-writer-client", "produce", "orders-eu", "first")
    assert wrote["ok"], wrote
    refused = call(cluster, "orders-writer-client", "produce", "payments", "nope")
    assert not refused["ok"] and refused["status"] == 403, refused
    # its rules allow no reading
    read = call(cluster, "orders-writer-client", "consume", "orders-eu", "orders-reader-w")
    assert not read["ok"] and read["status"] == 403, read


def test_a_reader_reads_with_its_group_and_cannot_write(acl_store: KindCluster) -> None:
    cluster = acl_store
    got = call(cluster, "orders-reader-client", "consume", "orders-eu", "orders-reader-1")
    assert got["ok"] and "first" in got["values"], got
    assert got["committed"], got  # the group's offsets were committed
    refused = call(cluster, "orders-reader-client", "produce", "orders-eu", "nope")
    assert not refused["ok"] and refused["status"] == 403, refused
    other = call(cluster, "orders-reader-client", "consume", "payments", "orders-reader-1")
    assert not other["ok"] and other["status"] == 403, other


def test_deleting_a_user_revokes_its_access(acl_store: KindCluster) -> None:
    cluster = acl_store
    assert call(cluster, "orders-writer-client", "produce", "orders-eu", "before")["ok"]
    kubectl(cluster, "delete", "msu", "orders-writer")
    started = time.monotonic()
    # The operator rewrites the access document; the kubelet updates the node's mounted copy.
    cluster.wait_until(
        lambda: "orders-writer" not in mounted_document(cluster),
        f"the node's mounted access document without the user within {REVOCATION_S} s",
        REVOCATION_S,
        0.5,
    )
    TIMINGS["user deleted to the node's mounted document without it"] = round(
        time.monotonic() - started, 1
    )
    # The pod keeps the token it was started with; the nodes must stop accepting it.
    outcome = cluster.wait_until(
        lambda: (
            (r := call(cluster, "orders-writer-client", "produce", "orders-eu", "after"))["ok"]
            is False
            and r
        ),
        f"the deleted user's token refused within {REVOCATION_S} s",
        REVOCATION_S,
        0.5,
    )
    TIMINGS["user deleted to token refused"] = round(time.monotonic() - started, 1)
    assert outcome["status"] == 401, outcome
    assert call(cluster, "orders-reader-client", "consume", "orders-eu", "orders-reader-2")["ok"]
