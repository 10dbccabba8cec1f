"""What the end-to-end tests on kind share: the store's names, the client pod, checks."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cluster_tools import KubectlError, exec_result
from fixtures_kind import NODE_IMAGE, KindCluster

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKLOAD = HERE / "workload.py"
OPERATOR_NAMESPACE = "msgstore-system"
RELEASE = "msgstore"
NAMESPACE = "shop"
STORE = "orders"
CLIENT_POD = "client"
# The client label a store's NetworkPolicy admits (see docs/SECURITY.md).
CLIENT_LABEL = ("msgstore.io/client", STORE)


def restricted_security(uid: int) -> dict[str, Any]:
    """A container securityContext that passes Pod Security `restricted`."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


@dataclass
class Shop:
    """The sample store in its namespace, and a client pod inside the cluster."""

    cluster: KindCluster
    namespace: str
    store: str
    client: str = CLIENT_POD  # the client pod the workload runs in

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.cluster.run_kubectl("-n", self.namespace, *args, **kw)

    def get(self, *args: str) -> Any:
        return self.cluster.get_json("-n", self.namespace, *args)

    def ca_file(self) -> Path:
        """The store's CA certificate, for clients on this machine."""
        path = self.cluster.workdir / f"{self.namespace}-{self.store}-ca.crt"
        got = self.kubectl(
            "get", "configmap", f"{self.store}-ca", "-o", "jsonpath={.data.ca\\.crt}"
        )
        path.write_text(got.stdout)
        return path

    def workload(self, *args: str, timeout: float = 600, pod: str | None = None) -> Any:
        """Runs tests/e2e/workload.py inside the client pod; its JSON answer.

        The workload writes its answer and exit status to files in the pod: under load,
        ``kubectl exec``'s stream can be cut (websocket close 1006) while the workload runs
        on, and then the answer is read from those files by further execs instead of the
        run failing with half an answer."""
        pod = pod or self.client
        run = f"/tmp/workload-{uuid.uuid4().hex[:12]}"
        script = (
            f'python3 - "$@" >{run}.out 2>{run}.err; echo $? >{run}.rc; '
            f"cat {run}.out; cat {run}.err >&2; exit $(cat {run}.rc)"
        )
        started = time.monotonic()
        got = self.kubectl(
            "exec", "-i", pod, "--", "sh", "-c", script, "workload", *args,
            input=WORKLOAD.read_text(), timeout=timeout, check=False,
        )  # fmt: skip
        if got.returncode != 0:
            left = max(30.0, timeout - (time.monotonic() - started))
            status = self.cluster.wait_until(
                lambda: self.kubectl(
                    "exec", pod, "--", "cat", f"{run}.rc", check=False
                ).stdout.strip(),
                f"the workload's exit status in {pod} (kubectl exec said: {got.stderr[-500:]})",
                left,
                interval=2,
            )
            out = self.kubectl("exec", pod, "--", "cat", f"{run}.out", f"{run}.err").stdout
            if status != "0":
                raise KubectlError(f"workload {' '.join(args)} exited with {status}:\n{out}")
            got = self.kubectl("exec", pod, "--", "cat", f"{run}.out")
        return json.loads(got.stdout.strip().splitlines()[-1])

    def start_workload(self, *args: str) -> subprocess.Popen[str]:
        """The same, in the background (for load during faults); see `finish`."""
        argv = [
            str(self.cluster.kubectl),
            "--kubeconfig",
            str(self.cluster.kubeconfig),
            "-n",
            self.namespace,
            "exec",
            "-i",
            self.client,
            "--",
            "python3",
            "-",
            *args,
        ]
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert proc.stdin is not None
        proc.stdin.write(WORKLOAD.read_text())
        proc.stdin.close()
        proc.stdin = None  # sent whole; communicate() must not flush it again
        return proc

    def stored(self, topic: str) -> int:
        """How many messages were written to `topic` (its partitions' end offsets summed),
        asked from inside the cluster."""
        return int(self.workload("ends", "--topic", topic)["total"])

    def wait_stored(self, topic: str, count: int, what: str, timeout: float = 120) -> None:
        """Until `topic` holds at least `count` messages: a load has reached the store."""
        self.cluster.wait_until(lambda: self.stored(topic) >= count, what, timeout, 1)

    @contextmanager
    def load_until_stopped(self, run: str, seconds: int) -> Iterator[subprocess.Popen[str]]:
        """A producer load on `orders` (batches of 20, 20 ms apart) for as long as the block
        runs (`seconds` at most): a stop file in the client pod ends it when the block ends,
        also when it fails. A load of fixed length can end before a slow fault is over."""
        stop = f"/tmp/{run}-load-stop"
        self.kubectl("exec", self.client, "--", "rm", "-f", stop)
        load = self.start_workload(
            "produce", "--topic", "orders", "--run", run, "--seconds", str(seconds),
            "--batch", "20", "--pause-ms", "20", "--stop-file", stop,
        )  # fmt: skip
        try:
            yield load
        finally:
            self.kubectl("exec", self.client, "--", "touch", stop, check=False)

    @staticmethod
    def finish(proc: subprocess.Popen[str], timeout: float = 600) -> Any:
        out, err = proc.communicate(timeout=timeout)
        return exec_result(proc.returncode, out, err)

    def wait_credentials(self) -> None:
        """Until the operator made the store's token Secret and CA ConfigMap."""
        self.cluster.wait_until(
            lambda: all(
                self.kubectl("get", kind, f"{self.store}-{what}", check=False).returncode == 0
                for kind, what in (("secret", "token"), ("configmap", "ca"))
            ),
            f"the token Secret and CA ConfigMap of {self.store}",
            timeout=180,
        )

    def node_pods(self) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.store},app.kubernetes.io/component=node"
        return list(self.get("pods", "-l", selector)["items"])

    def store_status(self) -> dict[str, Any]:
        return dict(self.get("messagestore", self.store).get("status") or {})

    def wait_store_ready(self, replicas: int, timeout: float = 420) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            status = self.store_status()
            conds = {c["type"]: c for c in status.get("conditions", [])}
            pods = self.node_pods()
            ok = (
                status.get("readyReplicas") == replicas
                and conds.get("Ready", {}).get("status") == "True"
                and len(pods) == replicas
                and all(pod_ready(p) for p in pods)
            )
            return status if ok else None

        return self.cluster.wait_until(
            ready, f"{self.store} Ready with {replicas} nodes", timeout, interval=2
        )

    def check_acked(
        self, produced: dict[str, Any], prefix: str, topic: str = "orders"
    ) -> dict[str, Any]:
        """Every acknowledged message is stored exactly once; unknown outcomes at most once."""
        stored = self.workload("values", "--topic", topic, "--prefix", prefix)["values"]
        seen: dict[str, list[Any]] = {}
        for value, partition, offset in stored:
            seen.setdefault(value, []).append((partition, offset))
        acked = {a[0]: (a[1], a[2]) for a in produced["acked"]}
        lost = sorted(v for v in acked if v not in seen)
        moved = sorted(v for v, where in acked.items() if v in seen and seen[v][0] != where)
        doubled = sorted(v for v, where in seen.items() if len(where) > 1)
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
        assert not moved, f"{len(moved)} messages not where acknowledged, e.g. " + ", ".join(
            f"{v} acknowledged at {acked[v]}, stored at {seen[v]}" for v in moved[:8]
        )
        assert not doubled, f"{len(doubled)} messages stored twice, e.g. {doubled[:5]}"
        unknown_written = sum(1 for v in produced["unknown"] if v in seen)
        return {
            "acked": len(acked),
            "unknown": len(produced["unknown"]),
            "unknown_written": unknown_written,
            "errors": produced["errors"][:5],
        }


def pod_ready(pod: dict[str, Any]) -> bool:
    conds = pod.get("status", {}).get("conditions", [])
    return pod.get("status", {}).get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conds
    )


def client_pod_manifest(namespace: str, store: str, name: str = CLIENT_POD) -> dict[str, Any]:
    """A long-lived client pod as docs/SECURITY.md describes one: the node image, the store's
    HTTPS endpoint, its CA (ConfigMap <store>-ca) and token, and the client label its
    NetworkPolicy admits."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {CLIENT_LABEL[0]: store}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "client",
                    "image": NODE_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                    "env": [
                        {
                            "name": "MSGSTORE_ENDPOINT",
                            "value": f"https://{store}.{namespace}.svc.cluster.local:8080",
                        },
                        {"name": "MSGSTORE_CA", "value": "/etc/msgstore/ca/ca.crt"},
                        {
                            "name": "MSGSTORE_TOKEN",
                            "valueFrom": {
                                "secretKeyRef": {"name": f"{store}-token", "key": "token"}
                            },
                        },
                    ],
                    "securityContext": restricted_security(10001),
                    "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                    "volumeMounts": [{"name": "ca", "mountPath": "/etc/msgstore/ca"}],
                }
            ],
            "volumes": [{"name": "ca", "configMap": {"name": f"{store}-ca"}}],
        },
    }


def spark_job_yaml(*args: str) -> dict[str, Any]:
    """`msgstore spark-job ingest ...` rendered by the CLI, as users do."""
    msgstore = Path(sys.executable).parent / "msgstore"
    got = subprocess.run(
        [str(msgstore), "spark-job", *args, "-o", "yaml"],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(yaml.safe_load(got.stdout))


def watch_pods(
    shop: Shop, selector: str, until: Any, timeout: float, interval: float = 1.0
) -> dict[str, dict[str, Any]]:
    """Polls pods matching `selector` until `until()` is truthy; every pod seen, last state."""
    seen: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while True:
        for pod in shop.get("pods", "-l", selector)["items"]:
            seen[pod["metadata"]["name"]] = {
                "node": pod["spec"].get("nodeName"),
                "phase": pod["status"].get("phase"),
                "role": pod["metadata"]["labels"].get("spark-role"),
            }
        if until():
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s; pods seen: {seen}")
        time.sleep(interval)
