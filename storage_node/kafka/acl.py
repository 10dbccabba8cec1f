"""Which ACL each Kafka API needs (``NEEDS``, the one table) and the checks its handler makes
with it (``Guard``), as Kafka's own authorizer asks them: the operation on each topic or
group a request names, answered with the API's authorization error code and nothing
stored or changed.

The principal is the connection's (``sasl.Session``): a user of the access document, the
node's token (super-user), its read token (reader) or, on a node without a token, anyone
(everything allowed). Each refusal is logged and counted by the authorizer (principal,
operation, resource, source address; ``msgstore_access_denied_total``), except topics and
groups left out of a listing (Metadata of all topics, ListGroups, OffsetFetch of all
topics): those are filtered silently, as Kafka filters them.

Where msgstore differs from Kafka's table (docs/KAFKA.md, "Users and ACLs"): the model has
no cluster resource, so CreateTopics needs CREATE on the topic, DescribeConfigs of a broker
and DescribeCluster need only an authenticated connection, and InitProducerId (idempotence
without a transactional id) needs WRITE on some topic (Kafka 3's rule, which also accepts
IDEMPOTENT_WRITE on the cluster); CreatePartitions needs CREATE (Kafka: ALTER), because
the access model names adding partitions a create, on every front end. The read token of
the two-token mode keeps what it had: reads only, so it is refused every API marked
``changes`` (OffsetCommit among them) although its reads and describes are allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from storage_node.access.authorizer import CLUSTER, Authorizer, Principal, PrincipalKind
from storage_node.access.document import Operation, ResourceType

READ, WRITE, CREATE = Operation.READ, Operation.WRITE, Operation.CREATE
DELETE, DESCRIBE = Operation.DELETE, Operation.DESCRIBE


@dataclass(frozen=True)
class Need:
    """What one API asks: ``topic`` on every topic it names (TOPIC_AUTHORIZATION_FAILED),
    ``group`` on its group (GROUP_AUTHORIZATION_FAILED); ``changes``: it stores or changes
    something (refused to the read token)."""

    topic: Operation | None = None
    group: Operation | None = None
    changes: bool = False
    any_topic: Operation | None = None  # on some topic (InitProducerId: WRITE)


NEEDS: dict[int, Need] = {
    18: Need(),  # ApiVersions: before authentication too
    17: Need(),  # SaslHandshake
    36: Need(),  # SaslAuthenticate
    60: Need(),  # DescribeCluster: the brokers, as Metadata gives them
    0: Need(topic=WRITE, changes=True),  # Produce
    1: Need(topic=READ),  # Fetch
    2: Need(topic=DESCRIBE),  # ListOffsets
    23: Need(topic=DESCRIBE),  # OffsetForLeaderEpoch
    3: Need(topic=DESCRIBE),  # Metadata: named topics refused, listed ones filtered
    32: Need(topic=DESCRIBE),  # DescribeConfigs (a broker's: any authenticated)
    19: Need(topic=CREATE, changes=True),  # CreateTopics
    20: Need(topic=DELETE, changes=True),  # DeleteTopics
    37: Need(topic=CREATE, changes=True),  # CreatePartitions (Kafka: ALTER)
    22: Need(any_topic=WRITE, changes=True),  # InitProducerId (CLUSTER_AUTHORIZATION_FAILED)
    10: Need(group=DESCRIBE),  # FindCoordinator
    11: Need(group=READ),  # JoinGroup
    14: Need(group=READ),  # SyncGroup
    12: Need(group=READ),  # Heartbeat
    13: Need(group=READ),  # LeaveGroup
    8: Need(group=READ, topic=READ, changes=True),  # OffsetCommit
    9: Need(group=DESCRIBE, topic=DESCRIBE),  # OffsetFetch: all topics filtered
    15: Need(group=DESCRIBE),  # DescribeGroups
    16: Need(group=DESCRIBE),  # ListGroups: filtered
}


NO_NEED = Need()


@dataclass
class Guard:
    """One request's checks of the connection's principal against its API's ``Need``.
    Answers are cached for the request (a Produce of many partitions of one topic asks
    once). Without a principal (not authenticated) everything is refused."""

    authorizer: Authorizer | None
    principal: Principal | None
    api_key: int
    source: str = ""
    _seen: dict[tuple[ResourceType, Operation, str], bool] = field(default_factory=dict, repr=False)
    _logged: set[tuple[ResourceType, Operation, str]] = field(default_factory=set, repr=False)

    @property
    def need(self) -> Need:
        return NEEDS.get(self.api_key, NO_NEED)

    def topic(self, name: str) -> bool:
        """May the principal do this API's topic operation on ``name``? (a refusal is
        logged and counted)"""
        return self._allowed(ResourceType.TOPIC, self.need.topic, name, audit=True)

    def group(self, name: str) -> bool:
        return self._allowed(ResourceType.GROUP, self.need.group, name, audit=True)

    def visible_topics(self, names: list[str]) -> list[str]:
        """The topics of a listing the principal may see (the others left out silently)."""
        return [n for n in names if self._allowed(ResourceType.TOPIC, DESCRIBE, n, False)]

    def visible_groups(self, names: list[str]) -> list[str]:
        return [n for n in names if self._allowed(ResourceType.GROUP, DESCRIBE, n, False)]

    def any_topic(self, what: str) -> bool:
        """May the principal do ``need.any_topic`` on some topic (``what``: the refused
        action, as the log names it)?"""
        operation = self.need.any_topic
        assert operation is not None, f"API {self.api_key} checks no topic type"
        if self.authorizer is None or self.principal is None:
            return False
        allowed = not self._read_only() and self.authorizer.allows_any(
            self.principal, operation, ResourceType.TOPIC
        )
        if not allowed:
            self.authorizer.denied(self.principal, operation.value, CLUSTER, what, self.source)
        return allowed

    def _read_only(self) -> bool:
        assert self.principal is not None
        return self.need.changes and self.principal.kind is PrincipalKind.READER

    def _allowed(
        self, resource: ResourceType, operation: Operation | None, name: str, audit: bool
    ) -> bool:
        assert operation is not None, f"API {self.api_key} checks no {resource.value}"
        if self.authorizer is None or self.principal is None:
            return False
        key = (resource, operation, name)
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = not self._read_only() and self.authorizer.allows(
                self.principal, operation, resource, name
            )
        if not found and audit and key not in self._logged:  # once per request
            self._logged.add(key)
            self.authorizer.denied(
                self.principal, operation.value, resource.value, name, self.source
            )
        return found
