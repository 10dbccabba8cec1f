"""The routing table: which node owns which partition (format in docs/ROUTING.md).

Pure data and validation, no I/O, so the node, the client, the local launcher and the
operator all share one definition of the document.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from storage_node.errors import InvalidArgument, InvalidName

ROUTING_FORMAT = 1
TOPIC_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
MANAGED_BY = ("local", "operator", "standalone")
COMPRESSIONS = ("none", "lz4")
DELETED_TOPICS = "deleted_topics"


def check_topic_name(name: object) -> str:
    """Return the name if it is a legal topic name, else raise InvalidName."""
    if not isinstance(name, str) or not TOPIC_NAME_RE.match(name) or name in (".", ".."):
        raise InvalidName(
            f"invalid topic name {name!r}: use 1-200 of A-Z a-z 0-9 . _ - (not '.' or '..')"
        )
    return name


@dataclass(frozen=True)
class NodeEntry:
    id: str
    address: str
    # Where clients outside the cluster reach this node (Kubernetes NodePort), if anywhere.
    external_address: str | None = None

    def address_for(self, listener: str) -> str:
        """The address of the given listener ("internal" or "external"), internal if none."""
        if listener == "external" and self.external_address:
            return self.external_address
        return self.address


@dataclass(frozen=True)
class TopicRoute:
    name: str
    partitions: int
    compression: str
    retention_hours: float
    owners: tuple[str, ...]

    def config_dict(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "compression": self.compression,
            "retention_hours": self.retention_hours,
        }


@dataclass(frozen=True)
class RoutingTable:
    """A validated routing document; ``raw`` keeps unknown fields for round trips."""

    generation: int
    managed_by: str
    nodes: tuple[NodeEntry, ...]
    topics: dict[str, TopicRoute]
    raw: dict[str, Any] = field(compare=False, repr=False, default_factory=dict)

    def node_address(self, node_id: str) -> str | None:
        for node in self.nodes:
            if node.id == node_id:
                return node.address
        return None

    def owner(self, topic: str, partition: int) -> str | None:
        route = self.topics.get(topic)
        if route is None or not 0 <= partition < route.partitions:
            return None
        return route.owners[partition]

    def owned_partitions(self, topic: str, node_id: str) -> list[int]:
        route = self.topics.get(topic)
        if route is None:
            return []
        return [p for p, owner in enumerate(route.owners) if owner == node_id]

    def to_json(self) -> dict[str, Any]:
        doc = copy.deepcopy(self.raw)
        doc.update(
            {
                "format": ROUTING_FORMAT,
                "generation": self.generation,
                "managed_by": self.managed_by,
                "nodes": [_node_json(n) for n in self.nodes],
                "topics": {
                    name: {
                        **doc.get("topics", {}).get(name, {}),
                        **route.config_dict(),
                        "owners": list(route.owners),
                    }
                    for name, route in sorted(self.topics.items())
                },
            }
        )
        return doc

    def with_topic(
        self,
        name: str,
        partitions: int,
        compression: str,
        retention_hours: float,
        exclude: frozenset[str] = frozenset(),
    ) -> RoutingTable:
        """A new table (generation + 1) that adds a topic, spreading its partitions evenly
        over the nodes (but those in ``exclude``, unless that leaves none)."""
        if not self.nodes:
            raise InvalidArgument("the routing table has no nodes")
        nodes = [n for n in self.nodes if n.id not in exclude] or list(self.nodes)
        already = sum(route.partitions for route in self.topics.values())
        start = already % len(nodes)
        owners = tuple(nodes[(start + p) % len(nodes)].id for p in range(partitions))
        topics = dict(self.topics)
        topics[name] = TopicRoute(name, partitions, compression, float(retention_hours), owners)
        return RoutingTable(self.generation + 1, self.managed_by, self.nodes, topics, self.raw)

    # -- deleting topics and adding partitions ----------------------------------------------
    def pending_deletions(self) -> dict[str, list[str]]:
        """Deleted topics -> ids of the nodes that have not deleted their copy yet.

        Kept in the document's ``deleted_topics`` (see docs/ROUTING.md); a node that was
        down when a topic was deleted deletes it when it next reads the table."""
        doc = self.raw.get(DELETED_TOPICS)
        if not isinstance(doc, dict):
            return {}
        out = {}
        for name, entry in doc.items():
            pending = entry.get("pending") if isinstance(entry, dict) else None
            if isinstance(pending, list) and pending:
                out[str(name)] = [str(n) for n in pending]
        return out

    def _with_deletions(
        self, topics: dict[str, TopicRoute], deletions: dict[str, Any]
    ) -> RoutingTable:
        raw = copy.deepcopy(self.raw)
        raw[DELETED_TOPICS] = deletions
        if not deletions:
            del raw[DELETED_TOPICS]
        return RoutingTable(self.generation + 1, self.managed_by, self.nodes, topics, raw)

    def without_topic(self, name: str) -> RoutingTable:
        """A new table (generation + 1) without the topic; every node must still delete it."""
        topics = {n: r for n, r in self.topics.items() if n != name}
        deletions = copy.deepcopy(self.raw.get(DELETED_TOPICS) or {})
        deletions[name] = {"generation": self.generation + 1, "pending": [n.id for n in self.nodes]}
        return self._with_deletions(topics, deletions)

    def with_deletion_done(self, name: str, node_ids: frozenset[str]) -> RoutingTable | None:
        """The table once these nodes deleted their copy (None when nothing changes)."""
        pending = self.pending_deletions().get(name, [])
        left = [n for n in pending if n not in node_ids]
        if left == pending:
            return None
        deletions = copy.deepcopy(self.raw.get(DELETED_TOPICS) or {})
        if left:
            deletions[name]["pending"] = left
        else:
            del deletions[name]
        return self._with_deletions(dict(self.topics), deletions)

    def with_partitions(
        self, name: str, partitions: int, exclude: frozenset[str] = frozenset()
    ) -> RoutingTable:
        """A new table (generation + 1) where the topic has ``partitions`` partitions: the
        existing ones keep their owners, the new ones are spread as ``with_topic`` does."""
        route = self.topics[name]
        nodes = [n for n in self.nodes if n.id not in exclude] or list(self.nodes)
        already = sum(r.partitions for r in self.topics.values())
        extra = tuple(
            nodes[(already + i) % len(nodes)].id for i in range(partitions - route.partitions)
        )
        topics = dict(self.topics)
        topics[name] = TopicRoute(
            name, partitions, route.compression, route.retention_hours, route.owners + extra
        )
        return RoutingTable(self.generation + 1, self.managed_by, self.nodes, topics, self.raw)


def _node_json(node: NodeEntry) -> dict[str, str]:
    doc = {"id": node.id, "address": node.address}
    if node.external_address:
        doc["external_address"] = node.external_address
    return doc


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise InvalidArgument(f"invalid routing table: {message}")


def parse_routing(doc: object) -> RoutingTable:
    """Validate a routing document and return it as a RoutingTable (InvalidArgument if bad)."""
    _require(isinstance(doc, dict), "the document must be a JSON object")
    assert isinstance(doc, dict)
    _require(doc.get("format") == ROUTING_FORMAT, f"'format' must be {ROUTING_FORMAT}")
    generation = doc.get("generation")
    _require(
        isinstance(generation, int) and not isinstance(generation, bool) and generation >= 0,
        "'generation' must be a non-negative integer",
    )
    assert isinstance(generation, int)
    managed_by = doc.get("managed_by", "operator")
    _require(managed_by in MANAGED_BY, f"'managed_by' must be one of {MANAGED_BY}")
    nodes_doc = doc.get("nodes")
    _require(isinstance(nodes_doc, list), "'nodes' must be a list")
    assert isinstance(nodes_doc, list)
    nodes: list[NodeEntry] = []
    for entry in nodes_doc:
        _require(isinstance(entry, dict), "each node must be an object")
        node_id, address = entry.get("id"), entry.get("address")
        _require(isinstance(node_id, str) and node_id != "", "node 'id' must be a string")
        _require(
            isinstance(address, str) and address.startswith(("http://", "https://")),
            f"node {node_id!r} needs an http(s) 'address'",
        )
        external = entry.get("external_address")
        _require(
            external is None
            or (isinstance(external, str) and external.startswith(("http://", "https://"))),
            f"node {node_id!r}: 'external_address' must be an http(s) URL",
        )
        nodes.append(
            NodeEntry(node_id, address.rstrip("/"), external.rstrip("/") if external else None)
        )
    ids = [n.id for n in nodes]
    _require(len(set(ids)) == len(ids), "node ids must be unique")
    topics_doc = doc.get("topics", {})
    _require(isinstance(topics_doc, dict), "'topics' must be an object")
    topics: dict[str, TopicRoute] = {}
    for name, tdoc in topics_doc.items():
        try:
            check_topic_name(name)
        except InvalidName as exc:
            raise InvalidArgument(f"invalid routing table: {exc.message}") from None
        _require(isinstance(tdoc, dict), f"topic {name!r} must be an object")
        partitions = tdoc.get("partitions")
        _require(
            isinstance(partitions, int)
            and not isinstance(partitions, bool)
            and 1 <= partitions <= 1024,
            f"topic {name!r}: 'partitions' must be an integer 1..1024",
        )
        compression = tdoc.get("compression", "lz4")
        _require(compression in COMPRESSIONS, f"topic {name!r}: bad 'compression'")
        retention = tdoc.get("retention_hours", 168.0)
        _require(
            isinstance(retention, int | float)
            and not isinstance(retention, bool)
            and retention > 0,
            f"topic {name!r}: 'retention_hours' must be a positive number",
        )
        owners = tdoc.get("owners")
        _require(
            isinstance(owners, list) and len(owners) == partitions,
            f"topic {name!r}: 'owners' must list one node id per partition",
        )
        for owner in owners:
            _require(owner in ids, f"topic {name!r}: owner {owner!r} is not a node")
        topics[name] = TopicRoute(name, partitions, compression, float(retention), tuple(owners))
    return RoutingTable(generation, managed_by, tuple(nodes), topics, dict(doc))


def standalone_table(node_id: str, address: str, topics: dict[str, dict[str, Any]]) -> RoutingTable:
    """The implicit table of a node without a routing file: it owns everything."""
    routes = {
        name: TopicRoute(
            name,
            int(cfg["partitions"]),
            str(cfg["compression"]),
            float(cfg["retention_hours"]),
            (node_id,) * int(cfg["partitions"]),
        )
        for name, cfg in topics.items()
    }
    return RoutingTable(0, "standalone", (NodeEntry(node_id, address),), routes, {})


def new_local_table(nodes: list[tuple[str, str]]) -> RoutingTable:
    """A fresh table for the local launcher."""
    return RoutingTable(1, "local", tuple(NodeEntry(i, a) for i, a in nodes), {}, {})
