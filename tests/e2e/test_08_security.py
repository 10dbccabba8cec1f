"""Security on the real cluster: the NetworkPolicy the operator made, certificates rotated
under load, and a status that names why a store cannot run.

The cluster enforces NetworkPolicy (kube-network-policies, see docs/KIND.md): refused and
admitted connections are tested in test_11_network_policy.py; here the policy's content.
"""

from __future__ import annotations

import json
import ssl

from e2e_support import Shop


def test_the_nodes_network_policy_admits_only_clients_nodes_and_the_operator(shop: Shop) -> None:
    policy = shop.get("networkpolicy", "orders-nodes")["spec"]
    node_labels = shop.node_pods()[0]["metadata"]["labels"]
    assert all(node_labels.get(k) == v for k, v in policy["podSelector"]["matchLabels"].items())
    assert policy["policyTypes"] == ["Ingress"]
    rule, external = policy["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}, {"protocol": "TCP", "port": 9092}]
    # the external Kafka listener's port: from anywhere (NodePort clients)
    assert external == {"ports": [{"protocol": "TCP", "port": 9094}]}
    selectors = [p.get("podSelector", {}).get("matchLabels") for p in rule["from"]]
    assert {"msgstore.io/client": "orders"} in selectors
    assert any(s and s.get("app.kubernetes.io/component") == "node" for s in selectors)
    operator = [p for p in rule["from"] if "namespaceSelector" in p]
    assert operator and operator[0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "msgstore-system"
    }
    # The client pod the tests use carries the label; the pods Spark starts do too.
    assert shop.get("pod", "client")["metadata"]["labels"]["msgstore.io/client"] == "orders"


def _served_cert(port: int) -> str | None:
    """The certificate the node behind `port` presents; None when no handshake completes in
    time (a node restarting, or a loaded machine), so a wait asks again."""
    try:
        return ssl.get_server_certificate(("127.0.0.1", port), timeout=10)
    except (OSError, ssl.SSLError):
        return None


def _rotate_under(shop: Shop, start: int, old: str, before: str) -> None:
    """With the load running: the node certificates' Secret deleted, reissued by the
    operator and served, and writes stored after it."""
    shop.wait_stored("orders", start + 200, "the load stored before the Secret is deleted")
    # A lost Secret is reissued by the operator; the kubelet updates the mounted files and
    # every node reloads them for new connections, without a restart.
    shop.kubectl("delete", "secret", "orders-node-certs")
    shop.cluster.wait_until(
        lambda: (
            shop.kubectl("get", "secret", "orders-node-certs", check=False).returncode == 0
            and shop.get("secret", "orders-node-certs")["metadata"]["resourceVersion"] != old
        ),
        "the operator to reissue the node certificates",
        120,
        2,
    )
    shop.cluster.wait_until(
        lambda: _served_cert(30081) not in (None, before),
        "orders-0 to serve its new certificate",
        240,
        3,
    )
    shop.wait_stored("orders", shop.stored("orders") + 500, "writes stored after the rotation")


def test_node_certificates_rotate_under_load_losing_nothing(shop: Shop) -> None:
    before = shop.cluster.wait_until(lambda: _served_cert(30081), "orders-0's certificate", 60, 2)
    old = shop.get("secret", "orders-node-certs")["metadata"]["resourceVersion"]
    start = shop.stored("orders")
    # The load is stopped once the new certificate has carried writes, however long the
    # reissue takes (a 150 s load on a loaded machine ended before the node served its new
    # certificate, so nothing was left to carry writes after it).
    with shop.load_until_stopped("rotate", seconds=600) as load:
        _rotate_under(shop, start, old, before)
    restarts = [
        s.get("restartCount", 0)
        for p in shop.node_pods()
        for s in p["status"].get("containerStatuses", [])
    ]
    produced = shop.finish(load)
    assert not produced["unknown"], produced["errors"]
    counts = shop.check_acked(produced, "rotate:")
    assert counts["acked"] > 500, counts
    logs = shop.kubectl("logs", "orders-0", "--tail=200").stdout
    assert "reloaded" in logs.lower(), logs[-2000:]
    assert restarts == [
        s.get("restartCount", 0)
        for p in shop.node_pods()
        for s in p["status"].get("containerStatuses", [])
    ]


def _degraded(shop: Shop, store: str) -> dict | None:
    status = shop.get("messagestore", store).get("status") or {}
    conds = {c["type"]: c for c in status.get("conditions", [])}
    cond = conds.get("Degraded", {})
    return cond if cond.get("status") == "True" else None


def test_a_store_that_cannot_run_turns_degraded_naming_why(shop: Shop) -> None:
    stuck = {
        "apiVersion": "msgstore.io/v1alpha1",
        "kind": "MessageStore",
        "metadata": {"name": "stuck", "namespace": shop.namespace},
        "spec": {
            "replicas": 1,
            "storage": {"size": "64Mi"},
            "topics": [{"name": "t", "partitions": 1}],
            "podTemplate": {"nodeSelector": {"msgstore.io/no-such-node": "true"}},
        },
    }
    shop.kubectl("apply", "-f", "-", input=json.dumps(stuck))
    cond = shop.cluster.wait_until(lambda: _degraded(shop, "stuck"), "stuck Degraded", 120, 2)
    assert cond["reason"] == "Unschedulable" and "stuck-0" in cond["message"], cond
    events = shop.kubectl(
        "get", "events", "--field-selector", "involvedObject.name=stuck,type=Warning"
    ).stdout
    assert "Unschedulable" in events, events
    shop.kubectl("delete", "messagestore", "stuck", "--wait=true", timeout=180)

    # A namespace whose quota allows no pods: the StatefulSet cannot create any.
    cluster = shop.cluster
    cluster.run_kubectl("create", "namespace", "quota")
    cluster.run_kubectl("-n", "quota", "create", "quota", "nopods", "--hard=pods=0")
    cluster.wait_until(
        lambda: cluster.run_kubectl("-n", "quota", "get", "sa", "default", check=False)
        .returncode == 0,
        "the namespace's default ServiceAccount",
    )  # fmt: skip
    quota = Shop(cluster, "quota", "capped")
    capped = {**stuck, "metadata": {"name": "capped", "namespace": "quota"}}
    capped["spec"] = {k: v for k, v in stuck["spec"].items() if k != "podTemplate"}
    quota.kubectl("apply", "-f", "-", input=json.dumps(capped))
    cond = cluster.wait_until(lambda: _degraded(quota, "capped"), "capped Degraded", 120, 2)
    assert cond["reason"] == "FailedCreate" and "quota" in cond["message"], cond
