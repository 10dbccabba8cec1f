"""Partition assignment: which node (StatefulSet ordinal) owns each partition.

Rules (data lives on the owner's volume, so ownership is sticky):

* an existing partition never changes owner;
* a new partition (new topic, more partitions, more nodes) goes to the node that owns the
  fewest partitions of that topic, then the fewest partitions overall, then the lowest
  ordinal. On a balanced cluster this is exactly the round-robin rule of docs/ROUTING.md
  (start at ``partitions already in the table % nodes``); after a scale-up the new, empty
  nodes take new partitions first, while one topic still spreads over all nodes;
* a node may only be removed (scale-down) when it owns no partition.

Everything here is pure and deterministic: the same inputs give the same table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .spec import TopicSpec

Owners = dict[str, list[int]]


class AssignmentError(ValueError):
    """The existing table cannot be kept under the requested spec (a permanent problem)."""


def assign_partitions(
    topics: Sequence[TopicSpec], node_count: int, existing: Mapping[str, Sequence[int]]
) -> Owners:
    """Owners of every partition of ``topics`` over ``node_count`` nodes, keeping ``existing``.

    Topics present in ``existing`` but no longer declared are kept as they are, because
    their data is still on the nodes.
    """
    if node_count < 1:
        raise AssignmentError("a cluster needs at least one node")
    owners: Owners = {topic: list(parts) for topic, parts in existing.items()}
    load = [0] * node_count
    for owned_topic, parts in owners.items():
        for node in parts:
            if not 0 <= node < node_count:
                raise AssignmentError(
                    f"partition of topic {owned_topic!r} is owned by node {node}, "
                    f"which is outside the cluster of {node_count} nodes"
                )
            load[node] += 1
    for topic in topics:
        current = owners.setdefault(topic.name, [])
        if topic.partitions < len(current):
            raise AssignmentError(
                f"topic {topic.name!r} has {len(current)} partitions; "
                f"it cannot be reduced to {topic.partitions}"
            )
        per_topic = [0] * node_count
        for node in current:
            per_topic[node] += 1
        while len(current) < topic.partitions:
            node = min(range(node_count), key=lambda n: (per_topic[n], load[n], n))
            current.append(node)
            per_topic[node] += 1
            load[node] += 1
    return owners


def partitions_per_node(owners: Mapping[str, Sequence[int]]) -> dict[int, int]:
    """How many partitions each node ordinal owns (nodes owning none are absent)."""
    counts: dict[int, int] = {}
    for parts in owners.values():
        for node in parts:
            counts[node] = counts.get(node, 0) + 1
    return counts


def scale_down_blockers(owners: Mapping[str, Sequence[int]], new_count: int) -> dict[int, int]:
    """Nodes at or beyond ``new_count`` that still own partitions: ordinal -> partitions."""
    return {
        node: count
        for node, count in sorted(partitions_per_node(owners).items())
        if node >= new_count
    }


def effective_replicas(
    desired: int, current: int | None, owners: Mapping[str, Sequence[int]]
) -> tuple[int, dict[int, int]]:
    """Replicas to run now and the nodes that block the desired scale-down (empty if none).

    ``current`` is the node count of the published table (None before the first one). A
    scale-down is applied only when every node to be removed owns nothing; otherwise the
    cluster stays at its current size.
    """
    if current is None or desired >= current:
        return desired, {}
    blockers = scale_down_blockers(owners, desired)
    if blockers:
        return current, blockers
    return desired, {}


def describe_blockers(blockers: Mapping[int, int], pod_name_of: Callable[[int], str]) -> str:
    """A sentence a user understands, e.g. 'node demo-3 owns 2 partitions'."""
    parts = []
    for node, count in sorted(blockers.items()):
        name = pod_name_of(node)
        parts.append(f"node {name} owns {count} partition{'s' if count != 1 else ''}")
    return "; ".join(parts)
