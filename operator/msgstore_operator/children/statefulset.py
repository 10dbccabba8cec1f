"""The StatefulSet of storage nodes: one pod and one volume per node."""

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

# Node processes run as this group so the volume is writable whatever the image's user.
FS_GROUP = 10001


def _env(
    owner: Owner, spec: StoreSpec, token_secret: str | None, domain: str
) -> list[dict[str, Any]]:
    # $(MSGSTORE_NODE_ID) is expanded by the kubelet: each pod advertises its own address,
    # the same one the routing table lists for it.
    host = f"$(MSGSTORE_NODE_ID).{naming.headless_service_name(owner.name)}.{owner.namespace}"
    env: list[dict[str, Any]] = [
        # The node id is the pod name: the routing table lists nodes by pod name.
        {"name": "MSGSTORE_NODE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MSGSTORE_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {
            "name": "MSGSTORE_ADVERTISE_ADDRESS",
            "value": f"{spec.scheme}://{host}.svc.{domain}:{spec.port}",
        },
    ]
    if spec.kafka.enabled:
        # Kafka clients in the cluster reach each broker at its per-pod DNS name; the
        # external listener advertises the routing table's kafka_external_address.
        env.append(
            {"name": "MSGSTORE_KAFKA_ADVERTISE", "value": f"{host}.svc.{domain}:{spec.kafka.port}"}
        )
    if spec.tls.enabled:
        if spec.tls.issuer_ref is None:  # the operator's per-node certificates
            cert = f"{naming.TLS_DIR}/$(MSGSTORE_NODE_ID).crt"
            key = f"{naming.TLS_DIR}/$(MSGSTORE_NODE_ID).key"
        else:  # cert-manager's Secret
            cert, key = f"{naming.TLS_DIR}/tls.crt", f"{naming.TLS_DIR}/tls.key"
        env += [
            {"name": "MSGSTORE_TLS_CERT", "value": cert},
            {"name": "MSGSTORE_TLS_KEY", "value": key},
            {"name": "MSGSTORE_TLS_CA", "value": naming.CA_FILE},
            # mTLS between nodes: log shipping, fencing and the routing hand-over need a
            # node's (or the operator's controller's) certificate of the store's CA
            {"name": "MSGSTORE_PEER_MTLS", "value": "true"},
        ]
    if spec.auth.enabled and token_secret:
        env.append(
            {
                "name": "MSGSTORE_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": token_secret, "key": spec.auth.token_key}},
            }
        )
    return env


def container_ports(spec: StoreSpec) -> list[dict[str, Any]]:
    """HTTP, and the Kafka listeners when on (the external one only with its NodePorts)."""
    ports = [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}]
    if spec.kafka.enabled:
        ports.append({"name": "kafka", "containerPort": spec.kafka.port, "protocol": "TCP"})
        if spec.kafka_node_port(0) is not None:
            ports.append(
                {
                    "name": "kafka-external",
                    "containerPort": spec.kafka.external_port,
                    "protocol": "TCP",
                }
            )
    return ports


def _env_from(owner: Owner, spec: StoreSpec) -> list[dict[str, Any]]:
    sources: list[dict[str, Any]] = [{"configMapRef": {"name": naming.config_map_name(owner.name)}}]
    if spec.tiering.enabled and spec.tiering.credentials_secret:
        sources.append({"secretRef": {"name": spec.tiering.credentials_secret}})
    return sources


def _probe(path: str, period: int, failures: int, scheme: str) -> dict[str, Any]:
    return {
        # The kubelet does not verify the certificate of an HTTPS probe.
        "httpGet": {"path": path, "port": "http", "scheme": scheme.upper()},
        "periodSeconds": period,
        "timeoutSeconds": 3,
        "failureThreshold": failures,
    }


def _default_affinity(owner: Owner) -> dict[str, Any]:
    """Prefer one node per host: losing a host then loses one node's partitions, not many."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": naming.selector_labels(owner.name)},
                    },
                }
            ]
        }
    }


def _container(
    owner: Owner, spec: StoreSpec, token_secret: str | None, domain: str
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "node",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["msgstore", "serve"],
        "envFrom": _env_from(owner, spec),
        "env": _env(owner, spec, token_secret, domain),
        "ports": container_ports(spec),
        # Recovery after a crash can take a while: the startup probe gives it up to 10
        # minutes before liveness applies; readiness turns true once recovery finished.
        "startupProbe": _probe("/healthz", 5, 120, spec.scheme),
        "livenessProbe": _probe("/healthz", 10, 6, spec.scheme),
        "readinessProbe": _probe("/readyz", 5, 3, spec.scheme),
        "volumeMounts": [
            {"name": naming.DATA_VOLUME, "mountPath": naming.DATA_DIR},
            {"name": naming.ROUTING_VOLUME, "mountPath": naming.ROUTING_DIR, "readOnly": True},
            {"name": naming.ACCESS_VOLUME, "mountPath": naming.ACCESS_DIR, "readOnly": True},
        ],
    }
    if spec.tls.enabled:
        container["volumeMounts"] += [
            {"name": naming.TLS_VOLUME, "mountPath": naming.TLS_DIR, "readOnly": True},
            {"name": naming.CA_VOLUME, "mountPath": naming.CA_DIR, "readOnly": True},
        ]
    if spec.restricted_pods:
        # Pod Security "restricted"; the root filesystem is read-only, /tmp is scratch.
        container["securityContext"] = container_security_context(read_only_root=True)
        container["volumeMounts"].append({"name": naming.TMP_VOLUME, "mountPath": "/tmp"})
    if spec.resources:
        container["resources"] = dict(spec.resources)
    return container


def _pod_spec(
    owner: Owner, spec: StoreSpec, token_secret: str | None, domain: str
) -> dict[str, Any]:
    tpl = spec.pod_template
    pod: dict[str, Any] = {
        # The node never talks to the Kubernetes API.
        "automountServiceAccountToken": False,
        # SIGTERM makes the node flush its write cache and write its clean-shutdown marker.
        "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
        "securityContext": (
            pod_security_context(NODE_UID, FS_GROUP)
            if spec.restricted_pods
            else {"fsGroup": FS_GROUP, "fsGroupChangePolicy": "OnRootMismatch"}
        ),
        "affinity": dict(tpl.affinity) if tpl.affinity else _default_affinity(owner),
        "containers": [_container(owner, spec, token_secret, domain)],
        "volumes": [
            {
                "name": naming.ROUTING_VOLUME,
                "configMap": {"name": naming.routing_config_map_name(owner.name)},
            },
            {  # users and ACLs (children/users.py); 0440 with the fsGroup, as the keys
                "name": naming.ACCESS_VOLUME,
                "secret": {
                    "secretName": naming.access_secret_name(owner.name),
                    "defaultMode": 0o440,
                },
            },
        ],
    }
    if spec.tls.enabled:
        secret = (
            naming.node_certs_secret_name(owner.name)
            if spec.tls.issuer_ref is None
            else naming.certificate_secret_name(owner.name)
        )
        pod["volumes"] += [
            # 0440 with the fsGroup: the node's group reads its key, nobody else.
            {"name": naming.TLS_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o440}},
            {
                "name": naming.CA_VOLUME,
                "configMap": {"name": naming.ca_config_map_name(owner.name)},
            },
        ]
    if spec.restricted_pods:
        pod["volumes"].append({"name": naming.TMP_VOLUME, "emptyDir": {"sizeLimit": "256Mi"}})
    if tpl.node_selector:
        pod["nodeSelector"] = dict(tpl.node_selector)
    if tpl.tolerations:
        pod["tolerations"] = [dict(t) for t in tpl.tolerations]
    if tpl.priority_class_name:
        pod["priorityClassName"] = tpl.priority_class_name
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    return pod


def scrape_annotations(spec: StoreSpec) -> dict[str, str]:
    """The prometheus.io/* annotations of annotation-based scraping, when the operator is
    told to set them (a spec's own pod annotations win)."""
    if not spec.scrape_annotations:
        return {}
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(spec.port),
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": spec.scheme,
    }


def _claim_template(owner: Owner, spec: StoreSpec) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": naming.DATA_VOLUME, "labels": naming.selector_labels(owner.name)},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": spec.storage.size}},
        },
    }
    if spec.storage.storage_class_name:
        claim["spec"]["storageClassName"] = spec.storage.storage_class_name
    return claim


def build_statefulset(
    owner: Owner,
    spec: StoreSpec,
    replicas: int,
    config_hash: str,
    token_secret: str | None,
    domain: str = "cluster.local",
) -> dict[str, Any]:
    """``replicas`` may differ from the spec while a scale-down is blocked."""
    tpl = spec.pod_template
    labels = {**tpl.labels, **naming.common_labels(owner.name, naming.NODE_COMPONENT)}
    annotations = {**scrape_annotations(spec), **tpl.annotations}
    annotations[naming.CONFIG_HASH_ANNOTATION] = config_hash
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": object_meta(owner, naming.statefulset_name(owner.name), naming.NODE_COMPONENT),
        "spec": {
            "replicas": replicas,
            "serviceName": naming.headless_service_name(owner.name),
            # Nodes are independent (no quorum): start and replace them all at once.
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            # Removed nodes own no partition (scale-down is refused otherwise) but their
            # volume may still hold consumer offsets: only deletion of the store may drop it.
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Delete" if spec.storage.delete_claim else "Retain",
                "whenScaled": "Retain",
            },
            "selector": {"matchLabels": naming.selector_labels(owner.name)},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": _pod_spec(owner, spec, token_secret, domain),
            },
            "volumeClaimTemplates": [_claim_template(owner, spec)],
        },
    }
