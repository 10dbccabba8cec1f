"""The routing table: which node owns which partition (format in docs/ROUTING.md).

Pure data and validation, no I/O, so the node, the client, the local launcher and the
operator all share one definition of the document.

Over 400 lines on purpose: the document's classes, its parser and the table's changes
(topics added, grown and deleted, log routes) are one format; every field is read, checked
and written here, so a format change touches one file.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from storage_node.errors import InvalidArgument, InvalidName, TopicConflict, TopicsManaged
from storage_node.formats.limits import MAX_PARTITIONS
from storage_node.formats.names import is_valid_name

if TYPE_CHECKING:
    from storage_node.store.types import TopicConfig

ROUTING_FORMAT = 1
MANAGED_BY = ("local", "operator", "standalone")
COMPRESSIONS = ("none", "lz4")
DELETED_TOPICS = "deleted_topics"


def check_topic_name(name: object) -> str:
    """Return the name if it is a legal topic name, else raise InvalidName."""
    if not is_valid_name(name):
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
    # host:port of the node's Kafka listener (docs/KAFKA.md), if it serves one.
    kafka_address: str | None = None
    # host:port of its external Kafka listener (a Kubernetes NodePort), if it serves one.
    kafka_external_address: str | None = None

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
class LogRoute:
    """A replicated commit log (docs/REPLICATION.md): the node that leads it, under which
    leader epoch, and every node holding a copy (the leader among them). Partition owners
    name logs; a client sends a log's partitions to its leader."""

    id: str
    leader: str
    epoch: int
    replicas: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"leader": self.leader, "epoch": self.epoch, "replicas": list(self.replicas)}


@dataclass(frozen=True)
class RoutingTable:
    """A validated routing document; ``raw`` keeps unknown fields for round trips."""

    generation: int
    managed_by: str
    nodes: tuple[NodeEntry, ...]
    topics: dict[str, TopicRoute]
    raw: dict[str, Any] = field(compare=False, repr=False, default_factory=dict)
    logs: dict[str, LogRoute] = field(default_factory=dict)
    replication_factor: int = 1
    min_in_sync: int = 1

    def leader_of(self, owner: str) -> str:
        """The node serving an owner: a replicated log's leader, or the owner itself."""
        log = self.logs.get(owner)
        return log.leader if log is not None else owner

    def logs_of(self, node_id: str) -> list[LogRoute]:
        """The replicated logs ``node_id`` holds a copy of (as leader or follower)."""
        return [log for _i, log in sorted(self.logs.items()) if node_id in log.replicas]

    def with_logs(self, logs: dict[str, LogRoute]) -> RoutingTable:
        """A new table (generation + 1) with these log routes."""
        return replace(self, generation=self.generation + 1, logs=dict(logs))

    def node_address_of_node(self, node_id: str) -> str | None:
        """The address of a node (not resolved through logs)."""
        for node in self.nodes:
            if node.id == node_id:
                return node.address
        return None

    def node_address(self, node_id: str) -> str | None:
        """The address of the node serving ``node_id`` (a log's leader for a log id)."""
        return self.node_address_of_node(self.leader_of(node_id))

    def owner(self, topic: str, partition: int) -> str | None:
        route = self.topics.get(topic)
        if route is None or not 0 <= partition < route.partitions:
            return None
        return route.owners[partition]

    def owned_partitions(self, topic: str, node_id: str) -> list[int]:
        route = self.topics.get(topic)
        if route is None:
            return []
        return [p for p, owner in enumerate(route.owners) if self.leader_of(owner) == node_id]

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
        if self.logs:
            doc["replication"] = {
                "factor": self.replication_factor,
                "min_in_sync": self.min_in_sync,
            }
            doc["logs"] = {i: log.to_json() for i, log in sorted(self.logs.items())}
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
        nodes = [n.id for n in self.nodes if n.id not in exclude] or [n.id for n in self.nodes]
        if self.logs:  # replicated: partitions go to logs (whose leaders are not excluded)
            nodes = [i for i, log in sorted(self.logs.items()) if log.leader not in exclude] or (
                sorted(self.logs)
            )
        already = sum(route.partitions for route in self.topics.values())
        start = already % len(nodes)
        owners = tuple(nodes[(start + p) % len(nodes)] for p in range(partitions))
        topics = dict(self.topics)
        topics[name] = TopicRoute(name, partitions, compression, float(retention_hours), owners)
        return replace(self, generation=self.generation + 1, topics=topics)

    def adding_topic(
        self, cfg: TopicConfig, exclude: frozenset[str] = frozenset()
    ) -> RoutingTable | None:
        """The table with a new topic as ``with_topic`` adds it, or None when the table has
        it with this configuration already. Refused (TopicConflict) when it has it with
        another, when nodes have yet to delete a copy of a deleted topic of that name, or
        when the table's topics are managed elsewhere."""
        name = cfg.name
        existing = self.topics.get(name)
        if existing is not None:
            wanted = {
                "partitions": cfg.partitions,
                "compression": cfg.compression,
                "retention_hours": float(cfg.retention_hours),
            }
            have = existing.config_dict()
            if have != wanted:
                raise TopicConflict(_conflict_message(name, have, wanted), existing=have)
            return None
        pending = self.pending_deletions().get(name)
        if pending:
            raise TopicConflict(
                f"topic {name!r} was deleted but nodes {', '.join(pending)} have not "
                "deleted their copy yet (down?); start them, then create it again",
                pending_nodes=pending,
            )
        self.check_managed(f"declare {name!r}")
        return self.with_topic(name, cfg.partitions, cfg.compression, cfg.retention_hours, exclude)

    def check_managed(self, what: str) -> None:
        """Refuse (TopicConflict) a topic change unless the table's topics are managed by the
        nodes of a ``local`` cluster; ``what`` is the change, as in "declare 'x'"."""
        if self.managed_by != "local":
            raise TopicsManaged(
                f"topics of this cluster are managed by the {self.managed_by}; {what} there"
            )

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
        return replace(self, generation=self.generation + 1, topics=topics, raw=raw)

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
        return replace(self, generation=self.generation + 1, topics=topics)


def _node_json(node: NodeEntry) -> dict[str, str]:
    doc = {"id": node.id, "address": node.address}
    if node.external_address:
        doc["external_address"] = node.external_address
    if node.kafka_address:
        doc["kafka_address"] = node.kafka_address
    if node.kafka_external_address:
        doc["kafka_external_address"] = node.kafka_external_address
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
        kafka = entry.get("kafka_address")
        _require(
            kafka is None or (isinstance(kafka, str) and _is_host_port(kafka)),
            f"node {node_id!r}: 'kafka_address' must be host:port",
        )
        kafka_external = entry.get("kafka_external_address")
        _require(
            kafka_external is None
            or (isinstance(kafka_external, str) and _is_host_port(kafka_external)),
            f"node {node_id!r}: 'kafka_external_address' must be host:port",
        )
        nodes.append(
            NodeEntry(
                node_id,
                address.rstrip("/"),
                external.rstrip("/") if external else None,
                kafka,
                kafka_external,
            )
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
        whole = isinstance(partitions, int) and not isinstance(partitions, bool)
        _require(
            whole and 1 <= partitions <= MAX_PARTITIONS,
            f"topic {name!r}: 'partitions' must be an integer 1..{MAX_PARTITIONS}",
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
        topics[name] = TopicRoute(name, partitions, compression, float(retention), tuple(owners))
    factor, min_in_sync, logs = _parse_logs(doc, ids)
    for route in topics.values():
        for owner in route.owners:
            _require(
                owner in (logs if logs else ids),
                f"topic {route.name!r}: owner {owner!r} is not a {'log' if logs else 'node'}",
            )
    return RoutingTable(
        generation, managed_by, tuple(nodes), topics, dict(doc), logs, factor, min_in_sync
    )


def _is_host_port(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) <= 65535


def _int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_replication(factor: object, min_in_sync: object) -> tuple[int, int]:
    """A replication factor 1-3 and a minimum in-sync count 1..factor (InvalidArgument)."""
    if not _int_in(factor, 1, 3):
        raise InvalidArgument(f"the replication factor must be 1, 2 or 3, not {factor!r}")
    assert isinstance(factor, int)
    if min_in_sync is None:
        min_in_sync = 2 if factor == 3 else factor
    if not _int_in(min_in_sync, 1, factor):
        raise InvalidArgument(
            f"min in sync must be an integer from 1 to {factor}, not {min_in_sync!r}"
        )
    assert isinstance(min_in_sync, int)
    return factor, min_in_sync


def _parse_logs(doc: dict[str, Any], ids: list[str]) -> tuple[int, int, dict[str, LogRoute]]:
    logs_doc = doc.get("logs")
    if logs_doc is None:
        return 1, 1, {}
    _require(isinstance(logs_doc, dict), "'logs' must be an object")
    rep = doc.get("replication", {})
    _require(isinstance(rep, dict), "'replication' must be an object")
    try:
        factor, min_in_sync = check_replication(rep.get("factor"), rep.get("min_in_sync"))
    except InvalidArgument as exc:
        raise InvalidArgument(f"invalid routing table: {exc.message}") from None
    logs: dict[str, LogRoute] = {}
    for log_id, ldoc in logs_doc.items():
        _require(isinstance(ldoc, dict), f"log {log_id!r} must be an object")
        leader, epoch, replicas = ldoc.get("leader"), ldoc.get("epoch"), ldoc.get("replicas")
        _require(leader in ids, f"log {log_id!r}: leader {leader!r} is not a node")
        _require(_int_in(epoch, 0, 2**62), f"log {log_id!r}: 'epoch' must be an integer >= 0")
        _require(
            isinstance(replicas, list)
            and all(r in ids for r in replicas)
            and len(set(replicas)) == len(replicas)
            and leader in replicas,
            f"log {log_id!r}: 'replicas' must list distinct nodes, the leader among them",
        )
        logs[log_id] = LogRoute(log_id, leader, epoch, tuple(replicas))
    return factor, min_in_sync, logs


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


def new_local_table(
    nodes: list[tuple[str, str]], replication_factor: int = 1, min_in_sync: int | None = None
) -> RoutingTable:
    """A fresh table for the local launcher; with a replication factor above 1 every node's
    log is led by that node and copied by the next ``factor - 1`` nodes."""
    factor, min_in_sync = check_replication(replication_factor, min_in_sync)
    entries = tuple(NodeEntry(i, a) for i, a in nodes)
    logs: dict[str, LogRoute] = {}
    if factor > 1:
        if factor > len(nodes):
            raise InvalidArgument(f"a replication factor of {factor} needs at least {factor} nodes")
        ids = [i for i, _a in nodes]
        for k, node_id in enumerate(ids):
            replicas = tuple(ids[(k + j) % len(ids)] for j in range(factor))
            # epoch 0: no leader acts yet; the controller names each (epoch 1) once the
            # replicas answer
            logs[node_id] = LogRoute(node_id, node_id, 0, replicas)
    return RoutingTable(1, "local", entries, {}, {}, logs, factor, min_in_sync)


def _conflict_message(name: str, have: dict[str, Any], wanted: dict[str, Any]) -> str:
    """What differs between an existing topic and a create of it, and what can be done."""
    differs = [f"{k} {have[k]!r} (asked {wanted[k]!r})" for k in wanted if have.get(k) != wanted[k]]
    text = (
        f"topic {name!r} exists with another configuration: {', '.join(differs)}; "
        "nothing was changed"
    )
    if wanted["partitions"] > have["partitions"]:
        text += (
            f"; to add partitions: msgstore topic alter {name} --partitions {wanted['partitions']}"
        )
    elif wanted["partitions"] < have["partitions"]:
        text += "; partitions can only be added, not removed"
    if any(have.get(k) != wanted[k] for k in ("compression", "retention_hours")):
        text += "; compression and retention of an existing topic are kept as created"
    return text
