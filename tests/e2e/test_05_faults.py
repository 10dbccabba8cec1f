"""Faults on real pods under load: a pod deleted with no grace, the node process killed inside
its container, a whole worker (kind node container) stopped and started. Each time the
producer's acknowledged messages are counted: none lost, none doubled."""

from __future__ import annotations

from e2e_support import Shop, pod_ready
from fixtures_kind import KindCluster


def _uid(shop: Shop, pod: str) -> str:
    return str(shop.get("pod", pod)["metadata"]["uid"])


def _restarts(shop: Shop, pod: str) -> int:
    statuses = shop.get("pod", pod)["status"].get("containerStatuses", [])
    return sum(int(s.get("restartCount", 0)) for s in statuses)


def test_a_force_deleted_node_pod_comes_back_on_its_volume_losing_nothing(shop: Shop) -> None:
    shop.wait_store_ready(3)
    old_uid = _uid(shop, "orders-1")
    base = shop.stored("orders")
    load = shop.start_workload(
        "produce", "--topic", "orders", "--run", "forcedel", "--seconds", "40", "--batch", "20",
        "--pause-ms", "10",
    )  # fmt: skip
    shop.wait_stored("orders", base + 1000, "the load stored before the pod is deleted")
    shop.kubectl("delete", "pod", "orders-1", "--grace-period=0", "--force")
    shop.cluster.wait_until(
        lambda: _uid(shop, "orders-1") != old_uid if shop.kubectl(
            "get", "pod", "orders-1", check=False).returncode == 0 else False,
        "a new orders-1 pod", 120, 1,
    )  # fmt: skip
    shop.wait_store_ready(3)
    produced = shop.finish(load)
    counts = shop.check_acked(produced, "forcedel:")
    assert counts["acked"] > 200, counts


def _container_pid(cluster: KindCluster, node: str, pod: str) -> str:
    """The host-side PID of a pod's node container, found through the kind node's CRI."""
    pod_id = cluster.docker("exec", node, "crictl", "pods", "--name", f"^{pod}$", "-q").split()[0]
    cid = cluster.docker("exec", node, "crictl", "ps", "-q", "--pod", pod_id, "--name", "node")
    template = "{{.info.pid}}"
    return cluster.docker(
        "exec", node, "crictl", "inspect", "-o", "go-template", "--template", template,
        cid.split()[0],
    ).strip()  # fmt: skip


def test_a_crashed_node_process_restarts_in_place_losing_nothing(shop: Shop) -> None:
    shop.wait_store_ready(3)
    pod = shop.get("pod", "orders-2")
    node = pod["spec"]["nodeName"]
    restarts = _restarts(shop, "orders-2")
    base = shop.stored("orders")
    load = shop.start_workload(
        "produce", "--topic", "orders", "--run", "crash", "--seconds", "30", "--batch", "20",
        "--pause-ms", "10",
    )  # fmt: skip
    shop.wait_stored("orders", base + 1000, "the load stored before the kill")
    pid = _container_pid(shop.cluster, node, "orders-2")
    # SIGKILL from outside the container: no flush, no clean-shutdown marker.
    shop.cluster.docker("exec", node, "kill", "-KILL", pid)
    shop.cluster.wait_until(
        lambda: _restarts(shop, "orders-2") > restarts, "orders-2's container restarted", 120, 1
    )
    shop.wait_store_ready(3)
    produced = shop.finish(load)
    counts = shop.check_acked(produced, "crash:")
    assert counts["acked"] > 200, counts
    logs = shop.kubectl("logs", "orders-2", "--previous", "--tail=5", check=False).stdout
    assert "store closed cleanly" not in logs, logs


def test_a_worker_stopped_and_started_again_brings_its_nodes_back(
    kind_cluster: KindCluster, shop: Shop
) -> None:
    shop.wait_store_ready(3)
    # The worker that does not run the client pod (the producer keeps running elsewhere).
    client_node = shop.get("pod", "client")["spec"]["nodeName"]
    victim = next(w for w in kind_cluster.worker_names if w != client_node)
    hosted = [p["metadata"]["name"] for p in shop.node_pods() if p["spec"]["nodeName"] == victim]
    assert hosted, "the anti-affinity spreads the nodes over both workers"
    before = shop.workload("digest", "--topic", "orders")
    kind_cluster.docker("stop", victim, timeout=180)
    assert kind_cluster.docker("inspect", "-f", "{{.State.Running}}", victim).strip() == "false"
    kind_cluster.docker("start", victim)
    kind_cluster.run_kubectl(
        "wait", "--for=condition=Ready", f"node/{victim}", "--timeout=300s", timeout=320
    )
    status = shop.wait_store_ready(3, timeout=600)
    assert status["readyReplicas"] == 3
    for name in hosted:
        assert pod_ready(shop.get("pod", name))
    assert shop.workload("digest", "--topic", "orders") == before
    produced = shop.workload(
        "produce", "--topic", "orders", "--run", "afterstop", "--count", "500", "--batch", "50"
    )
    assert not produced["unknown"], produced["errors"]
    shop.check_acked(produced, "afterstop:")
