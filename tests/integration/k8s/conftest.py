"""A real Kubernetes control plane for the tests in this folder (see README.md here).

kwokctl starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kwok
controller as local processes bound to 127.0.0.1, all built from source. kwok stands in for
the kubelet (nothing here can run containers): it marks fake nodes Ready and pods Running.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_tools import K8sCluster
from fixtures_controlplane import require_binary

from storage_node.cli.local import free_port

FAKE_NODE_COUNT = 3
PORT_OPTIONS = (
    "kubeApiserverPort",
    "etcdPort",
    "etcdPeerPort",
    "kubeControllerManagerPort",
    "kubeSchedulerPort",
    "kwokControllerPort",
)
CLUSTER_CREATE_TIMEOUT = "5m"


def _distinct_free_ports(count: int) -> list[int]:
    """Free loopback ports, all different (see ``storage_node.cli.local.free_port``)."""
    ports: list[int] = []
    for _ in range(count):
        ports.append(free_port("127.0.0.1", ports))
    return ports


def _kwokctl_config(bin_dir: Path) -> dict[str, Any]:
    """kwokctl settings: binary runtime, our binaries, everything on loopback."""
    return {
        "kind": "KwokctlConfiguration",
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "options": {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            # Ports picked by the OS, so parallel clusters on one machine never collide.
            **dict(zip(PORT_OPTIONS, _distinct_free_ports(len(PORT_OPTIONS)), strict=True)),
            "kubeApiserverBinary": str(bin_dir / "kube-apiserver"),
            "kubeControllerManagerBinary": str(bin_dir / "kube-controller-manager"),
            "kubeSchedulerBinary": str(bin_dir / "kube-scheduler"),
            "kubectlBinary": str(bin_dir / "kubectl"),
            "etcdBinary": str(bin_dir / "etcd"),
            "kwokControllerBinary": str(bin_dir / "kwok"),
        },
        # As for the kind cluster (tests/fixtures_kind.py): on a loaded machine a leader that
        # misses a lease renewal exits and relists everything, and etcd's fsyncs stall every
        # write; this control plane has one of each component and is thrown away.
        "componentsPatches": [
            {"name": name, "extraArgs": [{"key": "leader-elect", "value": "false"}]}
            for name in ("kube-controller-manager", "kube-scheduler")
        ]
        + [{"name": "etcd", "extraArgs": [{"key": "unsafe-no-fsync", "value": "true"}]}],
    }


def _fake_node(index: int) -> dict[str, Any]:
    """A node the kwok controller keeps Ready; sized so scheduling is never the bottleneck."""
    name = f"kwok-node-{index}"
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/role": "agent",
                "type": "kwok",
                "topology.kubernetes.io/zone": f"zone-{index % 2}",
            },
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _component_logs(workdir: Path, name: str) -> str:
    """The last lines of every component log, to explain a failed start."""
    parts = []
    for log in sorted((workdir / "clusters" / name / "logs").glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-25:]
        parts.append(f"--- {log.name} ---\n" + "\n".join(lines))
    return "\n".join(parts)


def _api_server_url(kubeconfig: Path) -> str:
    doc = yaml.safe_load(kubeconfig.read_text())
    return str(doc["clusters"][0]["cluster"]["server"])


def _delete_cluster(kwokctl: Path, name: str, env: dict[str, str], workdir: Path) -> None:
    """Stops every component; falls back to signalling the recorded pids."""
    proc = subprocess.run(
        [str(kwokctl), "delete", "cluster", "--name", name],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if proc.returncode == 0:
        return
    for pid_file in (workdir / "clusters" / name / "pids").glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text().strip()), 9)
        except (ValueError, ProcessLookupError, PermissionError):
            pass


@pytest.fixture(scope="session")
def k8s_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[K8sCluster]:
    """A kwokctl cluster for the whole session; torn down at the end, also after failures."""
    kwokctl = require_binary("kwokctl")
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"):
        require_binary(component)
    bin_dir = kwokctl.parent
    workdir = tmp_path_factory.mktemp("kwok")
    name = f"msgstore-{uuid.uuid4().hex[:8]}"
    kubeconfig = workdir / "kubeconfig"
    config_path = workdir / "kwokctl.yaml"
    config_path.write_text(yaml.safe_dump(_kwokctl_config(bin_dir)))
    env = dict(os.environ)
    env.update(
        {
            "KWOK_WORKDIR": str(workdir),
            "KUBECONFIG": str(kubeconfig),
            "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    create = subprocess.run(
        [
            str(kwokctl),
            "create",
            "cluster",
            "--name",
            name,
            "--config",
            str(config_path),
            "--runtime",
            "binary",
            "--kubeconfig",
            str(kubeconfig),
            "--disable-qps-limits",
            "--wait",
            CLUSTER_CREATE_TIMEOUT,
            "--timeout",
            CLUSTER_CREATE_TIMEOUT,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        if create.returncode != 0:
            pytest.fail(
                f"kwokctl could not create the test cluster (exit {create.returncode}):\n"
                f"{create.stdout}\n{create.stderr}\n{_component_logs(workdir, name)}",
                pytrace=False,
            )
        cluster = K8sCluster(
            name=name,
            kubeconfig=kubeconfig,
            api_server_url=_api_server_url(kubeconfig),
            kubectl=require_binary("kubectl"),
            helm=require_binary("helm"),
            bin_dir=bin_dir,
            workdir=workdir,
            env=env,
        )
        nodes = {"apiVersion": "v1", "kind": "List", "items": []}
        nodes["items"] = [_fake_node(i) for i in range(FAKE_NODE_COUNT)]
        cluster.run_kubectl("apply", "-f", "-", input=json.dumps(nodes))
        cluster.run_kubectl(
            "wait", "--for=condition=Ready", "node", "--all", "--timeout=120s", timeout=150
        )
        yield cluster
    finally:
        _delete_cluster(kwokctl, name, env, workdir)
