"""Partition assignment: deterministic, even, sticky; scale-down only for empty nodes."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgstore_operator.assignment import (
    AssignmentError,
    assign_partitions,
    effective_replicas,
    partitions_per_node,
    scale_down_blockers,
)
from msgstore_operator.spec import TopicSpec


def routing_md_rule(topics, nodes):
    """The round-robin rule of docs/ROUTING.md for topics added one by one."""
    owners, already = {}, 0
    for name, partitions in topics:
        start = already % nodes
        owners[name] = [(start + p) % nodes for p in range(partitions)]
        already += partitions
    return owners


def test_fresh_cluster_matches_the_documented_round_robin():
    topics = [("a", 4), ("b", 3), ("c", 7), ("d", 1)]
    existing = {}
    for name, _ in topics:  # topics arrive one at a time, as users add them
        existing = assign_partitions(
            [TopicSpec(n, p) for n, p in topics if n in existing or n == name], 3, existing
        )
    assert existing == routing_md_rule(topics, 3)


def test_deterministic():
    topics = [TopicSpec("a", 5), TopicSpec("b", 9)]
    assert assign_partitions(topics, 4, {}) == assign_partitions(topics, 4, {})


def test_new_topic_spreads_evenly_over_all_nodes():
    owners = assign_partitions([TopicSpec("a", 12)], 4, {})
    assert sorted(partitions_per_node(owners).values()) == [3, 3, 3, 3]


def test_existing_owners_never_move_on_scale_up():
    before = assign_partitions([TopicSpec("a", 6)], 3, {})
    after = assign_partitions([TopicSpec("a", 6)], 5, before)
    assert after == before


def test_new_partitions_prefer_new_nodes_after_scale_up():
    before = assign_partitions([TopicSpec("a", 6)], 3, {})
    after = assign_partitions([TopicSpec("a", 6), TopicSpec("b", 5)], 5, before)
    assert after["a"] == before["a"]
    assert after["b"][:2] == [3, 4]  # the empty nodes first
    assert sorted(after["b"]) == [0, 1, 2, 3, 4]  # and the topic still spans every node


def test_more_partitions_keep_the_old_ones():
    before = assign_partitions([TopicSpec("a", 3)], 3, {})
    after = assign_partitions([TopicSpec("a", 5)], 3, before)
    assert after["a"][:3] == before["a"] and len(after["a"]) == 5


def test_fewer_partitions_is_refused():
    before = assign_partitions([TopicSpec("a", 4)], 2, {})
    with pytest.raises(AssignmentError, match="cannot be reduced"):
        assign_partitions([TopicSpec("a", 2)], 2, before)


def test_owner_outside_the_cluster_is_refused():
    with pytest.raises(AssignmentError, match="outside the cluster"):
        assign_partitions([TopicSpec("a", 2)], 2, {"a": [0, 3]})


def test_undeclared_topic_is_kept():
    assert assign_partitions([], 2, {"old": [1, 0]}) == {"old": [1, 0]}


def test_scale_down_blocked_by_owning_nodes():
    owners = {"a": [0, 1, 2, 3, 4]}
    assert scale_down_blockers(owners, 3) == {3: 1, 4: 1}
    assert effective_replicas(3, 5, owners) == (5, {3: 1, 4: 1})


def test_scale_down_of_empty_nodes_is_allowed():
    owners = {"a": [0, 1, 2]}
    assert effective_replicas(3, 5, owners) == (3, {})
    assert effective_replicas(7, 5, owners) == (7, {})
    assert effective_replicas(2, None, {}) == (2, {})


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(1, 6)), min_size=1, max_size=12
    )
)
def test_random_histories_keep_owners_and_balance(steps):
    """Any sequence of (topic, partitions, nodes) changes: owners stick, load stays even."""
    owners, declared, nodes = {}, {}, 1
    for topic_index, partitions, node_count in steps:
        name = f"t{topic_index}"
        declared[name] = max(declared.get(name, 0), partitions)
        nodes = max(nodes, node_count)  # scale-down is never applied to owning nodes here
        new = assign_partitions([TopicSpec(n, p) for n, p in declared.items()], nodes, owners)
        for topic, parts in owners.items():
            assert new[topic][: len(parts)] == parts
        for topic, parts in new.items():
            assert len(parts) == declared[topic] and all(0 <= n < nodes for n in parts)
        owners = new
    # a topic created on a stable cluster spreads within one partition per node
    fresh = assign_partitions([TopicSpec("x", 11)], nodes, {})
    counts = [fresh["x"].count(n) for n in range(nodes)]
    assert max(counts) - min(counts) <= 1
