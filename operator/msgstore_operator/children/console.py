"""The web console of a store (``spec.console.enabled``): a Deployment running
``msgstore console`` against the store's client Service, and a ClusterIP Service (a
NodePort with ``spec.console.nodePort``). The console is a client of the store: its pods
carry the client label the store's NetworkPolicy lets in, run under Pod Security
"restricted", and hold only the CA (to verify the nodes) and the store's token, which the
console uses for the routing table and the metrics it charts; users log in with their own
token."""

from __future__ import annotations

from typing import Any

from msgstore_operator.pod_security import (
    NODE_UID,
    container_security_context,
    pod_security_context,
)

from .. import naming
from ..spec import StoreSpec
from .meta import Owner, object_meta
from .network import client_labels

COMPONENT = "console"
PORT = 8080


def console_name(store: str) -> str:
    return f"{store}-console"


def console_selector(store: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": naming.APP_NAME,
        "app.kubernetes.io/instance": store,
        "app.kubernetes.io/component": COMPONENT,
    }


def _probe(period: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/healthz", "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 3,
        "failureThreshold": 3,
    }


def _container(owner: Owner, spec: StoreSpec, endpoint: str, token: str | None) -> dict:
    args = ["console", "--endpoint", endpoint, "--host", "0.0.0.0", "--port", str(PORT)]
    env: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = [{"name": naming.TMP_VOLUME, "mountPath": "/tmp"}]
    if spec.tls.enabled:
        args += ["--ca", naming.CA_FILE]
        mounts.append({"name": naming.CA_VOLUME, "mountPath": naming.CA_DIR, "readOnly": True})
    if spec.console.admin:
        args.append("--admin")
    if token:
        env.append(
            {
                "name": "MSGSTORE_CONSOLE_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": token, "key": spec.auth.token_key}},
            }
        )
    container: dict[str, Any] = {
        "name": COMPONENT,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["msgstore"],
        "args": args,
        "env": env,
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "livenessProbe": _probe(10),
        "readinessProbe": _probe(5),
        "volumeMounts": mounts,
        "resources": dict(spec.console.resources)
        or {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}},
    }
    if spec.restricted_pods:
        container["securityContext"] = container_security_context(read_only_root=True)
    return container


def build_console_deployment(
    owner: Owner, spec: StoreSpec, endpoint: str, token: str | None
) -> dict[str, Any]:
    """``endpoint``: the store's client Service; ``token``: the Secret of the store's
    token (None without auth)."""
    labels = {**console_selector(owner.name), **client_labels(owner.name)}
    volumes: list[dict[str, Any]] = [{"name": naming.TMP_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}}]
    if spec.tls.enabled:
        volumes.append(
            {"name": naming.CA_VOLUME, "configMap": {"name": naming.ca_config_map_name(owner.name)}}
        )
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,  # the console never talks to Kubernetes
        "containers": [_container(owner, spec, endpoint, token)],
        "volumes": volumes,
    }
    if spec.restricted_pods:
        pod["securityContext"] = pod_security_context(NODE_UID)
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(owner, console_name(owner.name), COMPONENT),
        "spec": {
            # sessions live in the process: one replica, so a login holds on every request
            "replicas": 1,
            "selector": {"matchLabels": console_selector(owner.name)},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def build_console_service(owner: Owner, spec: StoreSpec) -> dict[str, Any]:
    port: dict[str, Any] = {"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}
    kind = "ClusterIP"
    if spec.console.node_port is not None:
        kind, port["nodePort"] = "NodePort", spec.console.node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(owner, console_name(owner.name), COMPONENT),
        "spec": {"type": kind, "selector": console_selector(owner.name), "ports": [port]},
    }
