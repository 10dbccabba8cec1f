"""Helpers for the operator's end-to-end tests: the CRD, the operator process, volumes.

The operator runs as a real `kopf run` process against the test API server. kwok stands in
for the kubelet (it reports pods Running and Ready without running containers), so the
node pods never really start: the operator takes readiness from pod status only.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from cluster_tools import K8sCluster

from storage_node.cli.local import free_port

REPO = Path(__file__).resolve().parents[3]
CRD_PATH = REPO / "crds" / "messagestore.yaml"
CRD_NAME = "messagestores.msgstore.io"
USER_CRD_PATH = REPO / "crds" / "messagestoreuser.yaml"
USER_CRD_NAME = "messagestoreusers.msgstore.io"
STORAGE_CLASS = "msgstore-test"
STATUS_INTERVAL_S = "2"


def install_crd(cluster: K8sCluster) -> None:
    """Both CRDs the operator serves (MessageStore, MessageStoreUser)."""
    for path, name in ((CRD_PATH, CRD_NAME), (USER_CRD_PATH, USER_CRD_NAME)):
        cluster.run_kubectl("apply", "--server-side", "-f", str(path))
        # Polled here, not `kubectl wait`: until the API server's CRD controller writes the
        # first condition, `kubectl wait --for=condition=...` fails at once on the missing
        # `.status.conditions` (seen on a loaded machine) instead of waiting.
        cluster.wait_until(
            lambda crd=name: _established(cluster, crd), f"CRD {name} established", 90, 0.5
        )


def _established(cluster: K8sCluster, name: str) -> bool:
    conditions = cluster.get_json(f"crd/{name}").get("status", {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def remove_crd(cluster: K8sCluster) -> None:
    for name in (USER_CRD_NAME, CRD_NAME):
        cluster.run_kubectl("delete", "crd", name, "--ignore-not-found", timeout=180)


class OperatorProcess:
    """`kopf run -m msgstore_operator` watching one namespace, logging to a file."""

    def __init__(
        self,
        cluster: K8sCluster,
        namespace: str,
        log_path: Path,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.extra_env = dict(extra_env or {})
        self.namespace = namespace
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.liveness_url = ""

    def start(self) -> None:
        self.launch()
        K8sCluster.wait_until(self.alive, "the operator's liveness endpoint", timeout=60)

    def launch(self) -> None:
        """Start the process without waiting for it to come up."""
        port = free_port()
        self.liveness_url = f"http://127.0.0.1:{port}/healthz"
        env = dict(self.cluster.env)
        env["MSGSTORE_OPERATOR_INTERVAL_S"] = STATUS_INTERVAL_S
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        log = open(self.log_path, "ab")  # noqa: SIM115 (closed by the child's exit)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kopf",
                "run",
                "--standalone",
                f"--namespace={self.namespace}",
                f"--liveness={self.liveness_url}",
                "-m",
                "msgstore_operator.handlers",
            ],
            env=env,
            cwd=str(REPO),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"the operator exited:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(self.liveness_url, timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def liveness(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.liveness_url, timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.log_text()))


def create_volumes(cluster: K8sCluster, namespace: str, store: str, count: int) -> list[str]:
    """Pre-bound PersistentVolumes for the pods' claims (`data-<store>-<n>`).

    No volume provisioner runs here; the real PV controller binds each claim to the volume
    reserved for it, and the scheduler then places the pod. Nothing is ever mounted.
    """
    names = []
    items = []
    for ordinal in range(count):
        name = f"{namespace}-{store}-{ordinal}"
        names.append(name)
        items.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {"msgstore-test/namespace": namespace}},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": STORAGE_CLASS,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/tmp/msgstore-test/{name}"},
                    "claimRef": {"namespace": namespace, "name": f"data-{store}-{ordinal}"},
                },
            }
        )
    cluster.run_kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    return names


def delete_volumes(cluster: K8sCluster, namespace: str) -> None:
    cluster.run_kubectl(
        "delete", "pv", "-l", f"msgstore-test/namespace={namespace}", "--wait=false", check=False
    )


def store_manifest(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "replicas": 3,
        "storage": {"size": "1Gi", "storageClassName": STORAGE_CLASS},
        "topics": [{"name": "orders", "partitions": 3}],
    }
    base.update(spec)
    return {
        "apiVersion": "msgstore.io/v1alpha1",
        "kind": "MessageStore",
        "metadata": {"name": name},
        "spec": base,
    }


def apply_json(cluster: K8sCluster, namespace: str, obj: dict[str, Any], check: bool = True):
    return cluster.run_kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=check
    )


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return {}


def wait_ready(cluster: K8sCluster, namespace: str, name: str, replicas: int, timeout: float = 120):
    """Until status says Ready with `replicas` ready nodes for the current generation."""

    def ready():
        ms = cluster.get_json("ms", name, "-n", namespace)
        status = ms.get("status") or {}
        ok = (
            status.get("phase") == "Ready"
            and status.get("readyReplicas") == replicas
            and status.get("observedGeneration") == ms["metadata"]["generation"]
            and condition(ms, "Ready").get("status") == "True"
        )
        return ms if ok else None

    return cluster.wait_until(ready, f"MessageStore {name} Ready with {replicas} nodes", timeout)


def routing_table(cluster: K8sCluster, namespace: str, name: str) -> dict[str, Any]:
    cm = cluster.get_json("configmap", f"{name}-routing", "-n", namespace)
    return json.loads(cm["data"]["routing.json"])


def wait_for(condition_fn: Any, what: str, timeout: float = 90) -> Any:
    return K8sCluster.wait_until(condition_fn, what, timeout=timeout)
