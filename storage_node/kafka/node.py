"""What the Kafka front end knows about its node: the runtime it serves through, its broker
identity (Kafka wants an int32 id per broker and one cluster id) and advertised addresses."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from storage_node.server.runtime import NodeRuntime


@dataclass(frozen=True)
class Broker:
    node_id: str  # the msgstore node id
    broker_id: int  # its index in the routing table's node list
    host: str
    port: int


class KafkaNode:
    """The node as the Kafka APIs see it. One per node, shared by its listeners (the
    internal one and, when set, the external one), so both serve the same groups."""

    def __init__(self, runtime: NodeRuntime, host: str, port: int, external_port: int = 0) -> None:
        self.runtime = runtime
        self.partitions = runtime.partitions  # every store access goes through it
        settings = runtime.settings
        self.max_request_bytes = settings.max_body_bytes
        # by default the host clients reach the node's HTTP API at (its advertised address,
        # not a wildcard listen address such as 0.0.0.0) with the Kafka port
        advertised = settings.kafka_advertise or f"{_http_host(settings.address)}:{port}"
        self.host, self.port = split_host_port(advertised)
        self.external_port = external_port

    def brokers(self, listener: str = "internal") -> list[Broker]:
        """Every node of the cluster (index = broker id) with its Kafka address on the
        given listener; a node whose Kafka address the routing table lacks is listed at its
        HTTP host with this node's Kafka port (the local cluster and the operator write the
        addresses). On the external listener each node is listed at its
        ``kafka_external_address`` (a node without one at its internal address)."""
        table = self.runtime.routing.current()
        me = self.runtime.settings.node_id
        out = []
        for i, node in enumerate(table.nodes):
            if listener == "external" and node.id == me:
                host, port = self._own_external(node.kafka_external_address)
            elif listener == "external" and node.kafka_external_address:
                host, port = split_host_port(node.kafka_external_address)
            elif node.id == me:
                host, port = self.host, self.port
            elif node.kafka_address:
                host, port = split_host_port(node.kafka_address)
            else:
                host, port = _http_host(node.address), self.port
            out.append(Broker(node.id, i, host, port))
        return out

    def _own_external(self, from_table: str | None) -> tuple[str, int]:
        """This node's external address: the setting, else the routing table's entry, else
        the internal host with the external port."""
        address = self.runtime.settings.kafka_external_advertise or from_table
        return split_host_port(address) if address else (self.host, self.external_port)

    def broker_id_of(self, node_id: str) -> int:
        for b in self.brokers():
            if b.node_id == node_id:
                return b.broker_id
        return -1

    @property
    def broker_id(self) -> int:
        return self.broker_id_of(self.runtime.settings.node_id)

    def cluster_id(self) -> str:
        """Stable for a cluster: derived from its node ids."""
        ids = ",".join(n.id for n in self.runtime.routing.current().nodes)
        return str(uuid.uuid5(uuid.NAMESPACE_URL, "msgstore:" + ids))

    def settings(self) -> Any:
        return self.runtime.settings


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _http_host(url: str) -> str:
    rest = url.split("://", 1)[-1]
    return split_host_port(rest)[0] if ":" in rest else rest.rstrip("/")


@dataclass(frozen=True)
class Placement:
    """Where a partition is served: the leader's broker id (-1 when unknown), the leader
    epoch (the replicated log's epoch; 0 without replication) and the replicas' broker ids."""

    leader: int
    epoch: int
    replicas: tuple[int, ...]


def topic_id(name: str) -> uuid.UUID:
    """A topic's id: stable for its name (a topic deleted and created again keeps its id)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, "msgstore-topic:" + name)


def placements(node: KafkaNode, topic: str, partitions: int) -> list[Placement]:
    """Every partition's placement, read from the routing table (this node for all of them
    when it has none)."""
    table = node.runtime.routing.current()
    ids = {b.node_id: b.broker_id for b in node.brokers()}
    route = table.topics.get(topic)
    out = []
    for p in range(partitions):
        owner = route.owners[p] if route is not None and p < route.partitions else None
        if owner is None:
            me = ids.get(node.runtime.settings.node_id, 0)
            out.append(Placement(me, 0, (me,)))
            continue
        log_route = table.logs.get(owner)
        if log_route is None:
            leader = ids.get(owner, -1)
            out.append(Placement(leader, 0, (leader,)))
        else:
            replicas = tuple(ids.get(r, -1) for r in log_route.replicas)
            out.append(Placement(ids.get(log_route.leader, -1), log_route.epoch, replicas))
    return out
