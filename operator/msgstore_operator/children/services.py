"""The headless Service (stable per-pod DNS) and the client Service (any node)."""

from __future__ import annotations

from typing import Any

from .. import naming
from ..spec import StoreSpec
from .meta import Owner, object_meta


def _port(spec: StoreSpec) -> dict[str, Any]:
    return {"name": "http", "port": spec.port, "targetPort": "http", "protocol": "TCP"}


def _ports(spec: StoreSpec) -> list[dict[str, Any]]:
    """HTTP, and Kafka when its listener is on (bootstrap at the client Service, brokers at
    their per-pod names through the headless one)."""
    ports = [_port(spec)]
    if spec.kafka.enabled:
        port = spec.kafka.port
        ports.append({"name": "kafka", "port": port, "targetPort": "kafka", "protocol": "TCP"})
    return ports


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
            "ports": _ports(spec),
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
            "ports": _ports(spec),
        },
    }


def build_external_service(
    owner: Owner, spec: StoreSpec, ordinal: int, port: int | None, kafka_port: int | None = None
) -> dict[str, Any]:
    """One node's NodePorts: outside clients reach exactly that node (the routing table lists
    them as the node's ``external_address`` and ``kafka_external_address``), as Kafka's
    external listeners do per broker. ``port``: the HTTP NodePort, ``kafka_port``: the one of
    the external Kafka listener (either may be None)."""
    ports: list[dict[str, Any]] = []
    if port is not None:
        ports.append({**_port(spec), "nodePort": port})
    if kafka_port is not None:
        ports.append(
            {
                "name": "kafka-external",
                "port": spec.kafka.external_port,
                "targetPort": "kafka-external",
                "protocol": "TCP",
                "nodePort": kafka_port,
            }
        )
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
            "ports": ports,
        },
    }
