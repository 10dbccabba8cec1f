"""A real Prometheus pod on the kind cluster, set up the way an SRE without the Prometheus
Operator does it: the usual annotation-based `kubernetes_sd_configs` job (pod role, keeping
the pods with `prometheus.io/scrape: "true"`, scheme, port and path from their annotations),
RBAC to list and watch pods, and the chart's alert rules (files/monitoring/msgstore-rules.yaml,
with the loopback test's short `for:` and windows so alerts fire in seconds).

The image holds only the `prometheus` binary of tests/integration/observability/build.sh (a
static Go binary, so on an empty base), built and loaded with kind like the MinIO image
(fixtures_kind.binary_image). The tests reach its HTTP API through `kubectl port-forward`.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from fixtures_kind import KindCluster, binary_image

from tests.integration.observability.prometheus_api import PrometheusAPI, fast_rules
from tests.integration.observability.referenced import RULES_FILE

NAME = "prometheus"
POD_LABELS = {"app.kubernetes.io/name": "prometheus"}
UID = 65534
SCRAPE_INTERVAL = "2s"


def network_peer(namespace: str) -> dict[str, Any]:
    """The NetworkPolicy peer (a store's spec.networkPolicy.ingressFrom) that lets this pod,
    in `namespace`, reach the store's nodes."""
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": dict(POD_LABELS)},
    }


def scrape_config(namespace: str) -> dict[str, Any]:
    """prometheus.yml: the annotation-based pod job (named so the rules' `job=~".*msgstore.*"`
    matches), over HTTPS without verification (node certificates name the pods' DNS names, not
    the IPs scraped; the chart's PodMonitor does the same by default)."""
    annotation = "__meta_kubernetes_pod_annotation_prometheus_io_"
    job = {
        "job_name": "msgstore",
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "tls_config": {"insecure_skip_verify": True},
        "relabel_configs": [
            {"source_labels": [f"{annotation}scrape"], "action": "keep", "regex": "true"},
            {
                "source_labels": [f"{annotation}scheme"],
                "target_label": "__scheme__",
                "regex": "(https?)",
            },
            {"source_labels": [f"{annotation}path"], "target_label": "__metrics_path__"},
            {
                "source_labels": ["__address__", f"{annotation}port"],
                "regex": r"([^:]+)(?::\d+)?;(\d+)",
                "replacement": "$1:$2",
                "target_label": "__address__",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
    }
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": ["/etc/prometheus/rules.yaml"],
        "scrape_configs": [job],
    }


def manifests(namespace: str, image: str) -> list[dict[str, Any]]:
    """ServiceAccount, Role and RoleBinding (list and watch pods), the configuration and the
    pod, all in `namespace` (the store's: discovery is limited to it)."""
    meta = {"name": NAME, "namespace": namespace}
    files = {
        "prometheus.yml": yaml.safe_dump(scrape_config(namespace)),
        "rules.yaml": yaml.safe_dump(fast_rules(RULES_FILE)),
    }
    container = {
        "name": NAME,
        "image": image,
        "imagePullPolicy": "Never",
        "args": [
            "--config.file=/etc/prometheus/prometheus.yml",
            "--storage.tsdb.path=/prometheus",
            "--web.listen-address=:9090",
        ],
        "ports": [{"name": "web", "containerPort": 9090}],
        "readinessProbe": {"httpGet": {"path": "/-/ready", "port": 9090}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/prometheus"},
            {"name": "data", "mountPath": "/prometheus"},
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": files},
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**meta, "labels": dict(POD_LABELS)},
            "spec": {
                "serviceAccountName": NAME,
                "terminationGracePeriodSeconds": 5,
                "containers": [container],
                "volumes": [
                    {"name": "config", "configMap": {"name": NAME}},
                    {"name": "data", "emptyDir": {}},
                ],
            },
        },
    ]


@contextmanager
def port_forward(cluster: KindCluster, namespace: str, pod: str, port: int) -> Iterator[str]:
    """`kubectl port-forward` to a pod's port on a free local port; yields the local URL and
    stops the process (by its PID) on the way out."""
    proc = subprocess.Popen(
        [
            str(cluster.kubectl),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "-n",
            namespace,
            "port-forward",
            f"pod/{pod}",
            f":{port}",
        ],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 9090"
        found = re.search(r"127\.0\.0\.1:(\d+)", first)
        if not found:
            err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
            raise AssertionError(f"kubectl port-forward printed {first!r} {err}")
        yield f"http://127.0.0.1:{found.group(1)}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def prometheus_pod(cluster: KindCluster, namespace: str, bin_dir: Path) -> Iterator[PrometheusAPI]:
    """The Prometheus pod, ready, scraping `namespace`; removed on the way out."""
    image = binary_image(cluster, NAME, bin_dir / "prometheus", f"{UID}:{UID}", base="scratch")
    objects = manifests(namespace, image)
    cluster.run_kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    try:
        cluster.run_kubectl(
            "-n", namespace, "wait", "--for=condition=Ready", f"pod/{NAME}", "--timeout=180s",
            timeout=200,
        )  # fmt: skip
        with port_forward(cluster, namespace, NAME, 9090) as url:
            yield PrometheusAPI(url)
    except BaseException:
        got = cluster.run_kubectl("-n", namespace, "logs", NAME, "--tail=60", check=False)
        print(f"--- prometheus pod log ---\n{got.stdout}{got.stderr}")
        raise
    finally:
        for obj in reversed(objects):
            cluster.run_kubectl(
                "-n", namespace, "delete", obj["kind"], NAME, "--wait=false", check=False
            )
