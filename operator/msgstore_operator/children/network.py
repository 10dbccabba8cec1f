"""The NetworkPolicy of a store's nodes: only chosen pods may connect to the node ports (HTTP,
and Kafka when its listener is on).

Allowed in: pods of the namespace labelled ``msgstore.io/client: <store>`` (the label a user
grants to a client; the Spark driver and executor pods of the store's jobs carry it), the
store's own nodes (routing, key lookups across nodes), the operator's pods when the operator
names its namespace, and any extra peers of ``spec.networkPolicy.ingressFrom`` (for example
an ingress controller's namespace, or an ipBlock for NodePort traffic to the HTTP port).
The external Kafka listener's port (only with ``external.kafkaNodePortBase``) is open to
every source, as Strimzi's nodeport listeners are: its clients come through NodePorts from
any node's address, and its own port keeps the in-cluster ports closed to them; the token
(SASL) and TLS protect it. Egress is not limited: nodes reach their object store and the
cluster DNS.
"""

from __future__ import annotations

from typing import Any

from .. import naming
from ..spec import StoreSpec
from .meta import Owner, object_meta

OPERATOR_POD_LABELS = {
    "app.kubernetes.io/name": "msgstore",
    "app.kubernetes.io/component": "operator",
}


def client_labels(store: str) -> dict[str, str]:
    """The label that lets a pod of the namespace connect to the store's nodes."""
    return {naming.CLIENT_LABEL: store}


def build_network_policy(
    owner: Owner, spec: StoreSpec, operator_namespace: str | None = None
) -> dict[str, Any]:
    peers: list[dict[str, Any]] = [
        {"podSelector": {"matchLabels": client_labels(owner.name)}},
        {"podSelector": {"matchLabels": naming.selector_labels(owner.name)}},
    ]
    if operator_namespace:
        peers.append(
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": operator_namespace}
                },
                "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)},
            }
        )
    peers += [dict(p) for p in spec.network_policy.ingress_from]
    ports = [{"protocol": "TCP", "port": spec.port}]
    if spec.kafka.enabled:
        ports.append({"protocol": "TCP", "port": spec.kafka.port})
    rules: list[dict[str, Any]] = [{"from": peers, "ports": ports}]
    if spec.kafka_node_port(0) is not None:
        rules.append({"ports": [{"protocol": "TCP", "port": spec.kafka.external_port}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(owner, naming.network_policy_name(owner.name), "node"),
        "spec": {
            "podSelector": {"matchLabels": naming.selector_labels(owner.name)},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    }
