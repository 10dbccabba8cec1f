"""The NetworkPolicy of a store's nodes: only chosen pods may connect to the node port.

Allowed in: pods of the namespace labelled ``msgstore.io/client: <store>`` (the label a user
grants to a client; the Spark driver and executor pods of the store's jobs carry it), the
store's own nodes (routing, key lookups across nodes), the operator's pods when the operator
names its namespace, and any extra peers of ``spec.networkPolicy.ingressFrom`` (for example
an ingress controller's namespace, or an ipBlock for NodePort traffic). Egress is not
limited: nodes reach their object store and the cluster DNS.
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
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(owner, naming.network_policy_name(owner.name), "node"),
        "spec": {
            "podSelector": {"matchLabels": naming.selector_labels(owner.name)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": [{"protocol": "TCP", "port": spec.port}]}],
        },
    }
