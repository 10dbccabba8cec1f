"""The routing table the operator publishes (format: docs/ROUTING.md, version 1).

Node ids are the pod names (``<name>-<ordinal>``), which is what each pod gets as
``MSGSTORE_NODE_ID``; addresses are the pods' stable DNS names through the headless Service.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage_node.errors import MsgStoreError
from storage_node.wire.routing_table import check_replication, parse_routing

from . import naming
from .spec import StoreSpec


@dataclass(frozen=True)
class PublishedTable:
    """What the currently published table says, in ordinals."""

    generation: int
    node_count: int
    owners: dict[str, list[int]]
    document: dict[str, Any]


def ordinal_of(name: str, node_id: str) -> int:
    """``demo-3`` -> 3 for MessageStore ``demo`` (ValueError for a foreign id)."""
    prefix = f"{naming.statefulset_name(name)}-"
    if not node_id.startswith(prefix) or not node_id[len(prefix) :].isdigit():
        raise ValueError(f"node id {node_id!r} is not a pod of {name!r}")
    return int(node_id[len(prefix) :])


def read_published(name: str, text: str | None) -> PublishedTable | None:
    """Parse the routing ConfigMap's document; None when there is none yet.

    Raises ValueError (with the validator's message) for a document that is not a valid
    table of this MessageStore: the operator must not guess owners of existing data.
    """
    if not text:
        return None
    try:
        table = parse_routing(json.loads(text))
    except MsgStoreError as exc:
        raise ValueError(exc.message) from exc
    node_count = len(table.nodes)
    for index, node in enumerate(table.nodes):
        if ordinal_of(name, node.id) != index:
            raise ValueError(f"node {node.id!r} is listed at position {index}")
    owners = {
        topic: [ordinal_of(name, owner) for owner in route.owners]
        for topic, route in table.topics.items()
    }
    return PublishedTable(table.generation, node_count, owners, table.to_json())


def _node_entry(
    name: str, namespace: str, spec: StoreSpec, ordinal: int, domain: str
) -> dict[str, Any]:
    entry = {
        "id": naming.pod_name(name, ordinal),
        "address": naming.node_address(name, namespace, ordinal, spec.port, domain, spec.scheme),
    }
    port = spec.external.node_port(ordinal)
    if port is not None:
        entry["external_address"] = naming.external_address(spec.external.host, port, spec.scheme)
    if spec.kafka.enabled:
        pod = naming.pod_dns_name(name, namespace, ordinal, domain)
        entry["kafka_address"] = f"{pod}:{spec.kafka.port}"
    kafka = spec.kafka_node_port(ordinal)
    if kafka is not None:
        # host:port (an IPv6 literal in brackets), as external_address without the scheme
        address = naming.external_address(spec.external.host, kafka)
        entry["kafka_external_address"] = address.split("://", 1)[1]
    return entry


def build_routing_document(
    name: str,
    namespace: str,
    spec: StoreSpec,
    node_count: int,
    owners: Mapping[str, Sequence[int]],
    generation: int,
    domain: str,
    previous_topics: Mapping[str, Mapping[str, Any]] | None = None,
    previous_logs: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The full document for ``node_count`` nodes and the given owners (ordinals).

    A topic that is published but no longer declared keeps its published configuration
    (``previous_topics``): its data is still on the nodes. With a replication factor above 1
    every pod's log is copied by the next ``factor - 1`` pods; its leader and epoch are the
    failover controller's (``previous_logs``), a new log starts at epoch 0 with no leader
    acting until the controller names one (docs/REPLICATION.md).
    """
    declared = {t.name: t for t in spec.topics}
    previous_topics = previous_topics or {}
    topics: dict[str, Any] = {}
    for topic in sorted(owners):
        parts = owners[topic]
        decl = declared.get(topic)
        old = previous_topics.get(topic, {})
        topics[topic] = {
            "partitions": len(parts),
            "compression": decl.compression if decl else old.get("compression", "lz4"),
            "retention_hours": (
                spec.topic_retention_hours(decl)
                if decl
                else float(old.get("retention_hours", spec.retention_hours))
            ),
            "owners": [naming.pod_name(name, n) for n in parts],
        }
    doc: dict[str, Any] = {
        "format": 1,
        "generation": generation,
        "managed_by": "operator",
        "nodes": [_node_entry(name, namespace, spec, i, domain) for i in range(node_count)],
        "topics": topics,
    }
    if spec.replication_factor > 1:
        factor, min_in_sync = check_replication(spec.replication_factor, spec.min_in_sync)
        doc["replication"] = {"factor": factor, "min_in_sync": min_in_sync}
        doc["logs"] = replicated_logs(name, node_count, factor, previous_logs or {})
    return doc


def replicated_logs(
    name: str, node_count: int, factor: int, previous: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """One log per pod, named after it, copied by the next ``factor - 1`` pods."""
    pods = [naming.pod_name(name, i) for i in range(node_count)]
    logs: dict[str, Any] = {}
    for k, pod in enumerate(pods):
        old = previous.get(pod, {})
        logs[pod] = {
            "leader": old.get("leader", pod),
            "epoch": int(old.get("epoch", 0)),
            "replicas": [pods[(k + j) % node_count] for j in range(factor)],
        }
    return logs


def with_generation(new_doc: dict[str, Any], previous: PublishedTable | None) -> dict[str, Any]:
    """Keep the previous generation when nothing changed, else bump it by one (nodes ignore
    a table whose generation is lower than the one they hold)."""
    if previous is None:
        return {**new_doc, "generation": 1}
    old = {k: v for k, v in previous.document.items() if k != "generation"}
    new = {k: v for k, v in new_doc.items() if k != "generation"}
    if old == new:
        return {**new_doc, "generation": previous.generation}
    return {**new_doc, "generation": previous.generation + 1}


def dumps(doc: Mapping[str, Any]) -> str:
    """Stable text (sorted keys) so an unchanged table gives an identical ConfigMap."""
    return json.dumps(doc, sort_keys=True, indent=1)
