"""The chart and the sample store on real pods: operator, node pods, routing, status."""

from __future__ import annotations

from e2e_support import OPERATOR_NAMESPACE, RELEASE, Shop, pod_ready
from fixtures_kind import KindCluster


def _operator_pod(cluster: KindCluster) -> dict:
    deploy = cluster.get_json("deployment", "-n", OPERATOR_NAMESPACE, f"{RELEASE}-operator")
    labels = deploy["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    pods = cluster.get_json("pods", "-n", OPERATOR_NAMESPACE, "-l", selector)["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def test_operator_runs_as_a_real_non_root_pod_with_a_read_only_root(
    kind_cluster: KindCluster, operator_release: str
) -> None:
    pod = _operator_pod(kind_cluster)
    name = pod["metadata"]["name"]
    assert pod_ready(pod), pod["status"]
    assert pod["spec"]["serviceAccountName"] == f"{RELEASE}-operator" or pod["spec"][
        "serviceAccountName"
    ].startswith(RELEASE)
    assert pod["spec"]["nodeName"] in kind_cluster.node_names
    # What the kernel says about the running process, not what the spec asks for.
    status = kind_cluster.run_kubectl(
        "exec", "-n", OPERATOR_NAMESPACE, name, "--", "cat", "/proc/1/status"
    ).stdout
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert set(uid_line.split()[1:]) == {"10001"}, uid_line
    write = kind_cluster.run_kubectl(
        "exec",
        "-n",
        OPERATOR_NAMESPACE,
        name,
        "--",
        "sh",
        "-c",
        "echo x > /opt/probe",
        check=False,
    )
    assert write.returncode != 0 and "Read-only file system" in write.stderr, write
    # The operator talks to the API server with its ServiceAccount's token from inside.
    logs = kind_cluster.run_kubectl("logs", "-n", OPERATOR_NAMESPACE, name).stdout
    assert "Traceback" not in logs, logs[-3000:]


def test_sample_store_runs_three_ready_node_pods_across_the_workers(
    kind_cluster: KindCluster, shop: Shop
) -> None:
    status = shop.wait_store_ready(3)
    assert status["phase"] == "Ready", status
    pods = shop.node_pods()
    assert sorted(p["metadata"]["name"] for p in pods) == ["orders-0", "orders-1", "orders-2"]
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert nodes == set(kind_cluster.worker_names), nodes
    # Ready comes from the kubelet probing the node's real /readyz.
    for pod in pods:
        probe = pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]
        assert probe["path"] == "/readyz"
        uid = shop.kubectl("exec", pod["metadata"]["name"], "--", "cat", "/proc/1/status").stdout
        assert "Uid:\t10001" in uid, uid


def test_every_node_serves_the_same_routing_table(shop: Shop) -> None:
    tables = shop.workload("cluster")
    assert sorted(tables) == ["orders-0", "orders-1", "orders-2"], tables
    first = next(iter(tables.values()))
    assert all(t == first for t in tables.values()), tables
    assert first["managed_by"] == "operator"
    assert sorted(first["topics"]) == ["audit-log", "orders"]
    assert {o for t in first["topics"].values() for o in t["owners"]} == set(tables)
    status = shop.store_status()
    assert status.get("readyReplicas") == 3
