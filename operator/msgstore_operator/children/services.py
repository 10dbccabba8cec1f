"""The headless Service (stable per-pod DNS) and the client Service (any node)."""

from __future__ import annotations

from typing import Any

from .. import naming
from ..spec import StoreSpec
from .meta import Owner, object_meta


def _port(spec: StoreSpec) -> dict[str, Any]:
    return {"name": "http", "port": spec.port, "targetPort": "http", "protocol": "TCP"}


def build_headless_service(owner: Owner, spec: StoreSpec) -> dict[str, Any]:
    """Gives each pod the DNS name used in the routing table, ready or not (a node must be
    reachable by its peers and clients while it recovers, to answer 503 rather than vanish)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(owner, naming.headless_service_name(owner.name), "node"),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": naming.selector_labels(owner.name),
            "ports": [_port(spec)],
        },
    }


def build_client_service(owner: Owner, spec: StoreSpec) -> dict[str, Any]:
    """Entry point for clients: any ready node serves the routing table at /v1/cluster."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(owner, naming.client_service_name(owner.name), "node"),
        "spec": {
            "type": "ClusterIP",
            "selector": naming.selector_labels(owner.name),
            "ports": [_port(spec)],
        },
    }


def build_external_service(
    owner: Owner, spec: StoreSpec, ordinal: int, port: int
) -> dict[str, Any]:
    """One node's NodePort: outside clients reach exactly that node (the routing table lists
    it as the node's ``external_address``), as Kafka's external listeners do per broker."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(
            owner, naming.external_service_name(owner.name, ordinal), "external"
        ),
        "spec": {
            "type": "NodePort",
            "selector": {
                **naming.selector_labels(owner.name),
                "statefulset.kubernetes.io/pod-name": naming.pod_name(owner.name, ordinal),
            },
            "ports": [{**_port(spec), "nodePort": port}],
        },
    }
