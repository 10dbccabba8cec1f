"""Smoke tests proving the test control plane is a real one.

The API server, scheduler and controller manager are the upstream binaries; only the kubelet
is simulated (by kwok), because nothing on the test machines can run containers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cluster_tools import KubectlError

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "controlplane" / "build.sh"


def pinned_kubernetes_version() -> str:
    match = re.search(r"^K8S_VERSION=(v\S+)$", BUILD_SCRIPT.read_text(), re.MULTILINE)
    assert match, "build.sh must pin K8S_VERSION"
    return match.group(1)


def deployment(name: str, replicas: int) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "example.invalid/none:1"}]},
            },
        },
    }


def test_api_server_reports_its_pinned_version(k8s_cluster):
    assert k8s_cluster.api_server_url.startswith("https://127.0.0.1:")
    version = json.loads(k8s_cluster.run_kubectl("get", "--raw", "/version").stdout)
    expected = pinned_kubernetes_version()
    assert version["gitVersion"] == expected
    assert (version["major"], version["minor"]) == ("1", expected.split(".")[1])
    client = json.loads(k8s_cluster.run_kubectl("version", "--client", "-o", "json").stdout)
    assert client["clientVersion"]["gitVersion"] == expected


def test_deployment_pods_are_scheduled_on_fake_nodes_and_run(k8s_cluster):
    ns = k8s_cluster.new_namespace("sched")
    k8s_cluster.run_kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(deployment("web", 3)))

    def ready_replicas():
        status = k8s_cluster.get_json("deployment", "web", "-n", ns).get("status", {})
        return status.get("readyReplicas") == 3

    k8s_cluster.wait_until(ready_replicas, "3 ready replicas of deployment web")
    pods = k8s_cluster.get_json("pods", "-n", ns, "-l", "app=web")["items"]
    assert len(pods) == 3
    fake_nodes = {
        n["metadata"]["name"]
        for n in k8s_cluster.get_json("nodes")["items"]
        if n["metadata"].get("annotations", {}).get("kwok.x-k8s.io/node") == "fake"
    }
    for pod in pods:
        assert pod["spec"]["nodeName"] in fake_nodes
        assert pod["status"]["phase"] == "Running"
    # The ReplicaSet between them was made by the real deployment controller.
    owners = {ref["kind"] for pod in pods for ref in pod["metadata"]["ownerReferences"]}
    assert owners == {"ReplicaSet"}


def test_garbage_collector_removes_children_of_a_deleted_owner(k8s_cluster):
    ns = k8s_cluster.new_namespace("gc")
    k8s_cluster.run_kubectl("create", "configmap", "owner", "-n", ns)
    k8s_cluster.run_kubectl("create", "configmap", "bystander", "-n", ns)
    owner_uid = k8s_cluster.get_json("configmap", "owner", "-n", ns)["metadata"]["uid"]
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "child",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}
            ],
        },
    }
    k8s_cluster.run_kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(child))

    k8s_cluster.run_kubectl("delete", "configmap", "owner", "-n", ns, "--wait=false")

    def child_gone():
        got = k8s_cluster.run_kubectl("get", "configmap", "child", "-n", ns, check=False)
        return got.returncode != 0 and "NotFound" in got.stderr

    k8s_cluster.wait_until(child_gone, "the garbage collector to delete the orphaned child")
    names = {c["metadata"]["name"] for c in k8s_cluster.get_json("configmaps", "-n", ns)["items"]}
    assert "bystander" in names and "child" not in names


def test_invalid_object_is_rejected_with_a_clear_message_and_nothing_is_created(k8s_cluster):
    ns = k8s_cluster.new_namespace("invalid")
    with pytest.raises(KubectlError) as rejected:
        k8s_cluster.run_kubectl(
            "apply", "-n", ns, "-f", "-", input=json.dumps(deployment("broken", -1))
        )
    assert "spec.replicas" in str(rejected.value)
    assert "must be greater than or equal to 0" in str(rejected.value)
    assert k8s_cluster.get_json("deployments", "-n", ns)["items"] == []
