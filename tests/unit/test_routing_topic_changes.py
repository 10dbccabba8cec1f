"""Topic changes decided by the routing table itself: adding a topic (idempotent, refused when
it clashes) and growing one (never shrinking). A refused change raises and leaves the table
as it was."""

from __future__ import annotations

import pytest

from storage_node.errors import InvalidArgument, TopicConflict
from storage_node.store import TopicConfig
from storage_node.store.topics import adds_partitions
from storage_node.wire.routing_table import RoutingTable, new_local_table, parse_routing


def _table() -> RoutingTable:
    return new_local_table([(f"node-{i}", f"http://127.0.0.1:{7000 + i}") for i in range(3)])


def test_adding_a_new_topic_spreads_it_as_with_topic_does() -> None:
    table = _table()
    added = table.adding_topic(TopicConfig("t", 3, "lz4", 24))
    assert added is not None
    assert added == table.with_topic("t", 3, "lz4", 24.0)
    assert added.generation == table.generation + 1
    assert added.topics["t"].owners == ("node-0", "node-1", "node-2")
    assert added.topics["t"].retention_hours == 24.0


def test_adding_a_topic_leaves_out_excluded_nodes() -> None:
    added = _table().adding_topic(TopicConfig("t", 4, "none", 1.0), frozenset({"node-1"}))
    assert added is not None
    assert set(added.topics["t"].owners) == {"node-0", "node-2"}


def test_adding_the_same_topic_again_changes_nothing() -> None:
    table = _table().with_topic("t", 3, "lz4", 24.0)
    assert table.adding_topic(TopicConfig("t", 3, "lz4", 24)) is None


def test_a_topic_with_another_configuration_is_refused_and_the_table_kept() -> None:
    table = _table().with_topic("t", 3, "lz4", 24.0)
    before = table.to_json()
    with pytest.raises(TopicConflict, match="exists with another configuration") as err:
        table.adding_topic(TopicConfig("t", 4, "lz4", 24.0))
    assert err.value.details["existing"] == {
        "partitions": 3,
        "compression": "lz4",
        "retention_hours": 24.0,
    }
    assert table.to_json() == before


def test_a_topic_still_being_deleted_is_refused() -> None:
    table = _table().with_topic("t", 3, "lz4", 24.0).without_topic("t")
    with pytest.raises(TopicConflict, match="have not deleted their copy") as err:
        table.adding_topic(TopicConfig("t", 3, "lz4", 24.0))
    assert err.value.details["pending_nodes"] == ["node-0", "node-1", "node-2"]
    done = table.with_deletion_done("t", frozenset({"node-0", "node-1", "node-2"}))
    assert done is not None and done.adding_topic(TopicConfig("t", 3, "lz4", 24.0)) is not None


def test_topics_managed_elsewhere_are_declared_there() -> None:
    doc = _table().to_json()
    doc["managed_by"] = "operator"
    table = parse_routing(doc)
    with pytest.raises(TopicConflict, match="managed by the operator; declare 't' there"):
        table.adding_topic(TopicConfig("t", 3, "lz4", 24.0))
    with pytest.raises(TopicConflict, match="managed by the operator; change 't' there"):
        table.check_managed("change 't'")
    _table().check_managed("change 't'")  # a local cluster's nodes manage their topics


def test_partitions_are_only_ever_added() -> None:
    assert adds_partitions("t", 3, 5) is True
    assert adds_partitions("t", 3, 3) is False
    with pytest.raises(InvalidArgument, match="can only be added, not removed") as err:
        adds_partitions("t", 3, 2)
    assert err.value.details == {"topic": "t", "partitions": 3}


def test_topic_changes_of_a_replicated_table_keep_its_logs() -> None:
    """Deleting a topic, finishing its deletion or adding partitions keeps the replicated
    logs, their epochs and the replication settings, in memory and in the document."""
    nodes = [(f"node-{i}", f"http://127.0.0.1:{7000 + i}") for i in range(3)]
    base = new_local_table(nodes, 3).with_topic("t", 3, "lz4", 1.0).with_topic("u", 3, "lz4", 1.0)
    moved = dict(base.logs)
    moved["node-0"] = type(moved["node-0"])("node-0", "node-1", 4, moved["node-0"].replicas)
    table = base.with_logs(moved)
    changed = [
        table.without_topic("u"),
        table.without_topic("u").with_deletion_done("u", frozenset(n for n, _a in nodes)),
        table.with_partitions("t", 5),
    ]
    for after in changed:
        assert after is not None
        assert after.logs == table.logs and after.leader_of("node-0") == "node-1"
        assert (after.replication_factor, after.min_in_sync) == (3, 2)
        again = parse_routing(after.to_json())
        assert again.logs == table.logs and again.replication_factor == 3


def test_a_node_refuses_topic_changes_of_a_read_only_operator_table(tmp_path) -> None:
    """On Kubernetes the table is the operator's ConfigMap, mounted read-only: a topic create
    sent to a node is refused with the place to declare it (409), not a 500 from the mount,
    and nothing (no lock file) is written beside the table."""
    import os
    import stat

    from storage_node.server.routing_state import RoutingState, write_routing_file

    doc = _table().to_json()
    doc["managed_by"] = "operator"
    folder = tmp_path / "routing"
    folder.mkdir()
    path = folder / "routing.json"
    write_routing_file(path, parse_routing(doc))
    os.chmod(folder, stat.S_IRUSR | stat.S_IXUSR)  # as a read-only mount
    try:
        state = RoutingState("node-0", "http://127.0.0.1:1", str(path), dict)
        with pytest.raises(TopicConflict, match="managed by the operator; declare 't' there"):
            state.add_topic(TopicConfig("t", 3, "lz4", 24.0))
        assert sorted(p.name for p in folder.iterdir()) == ["routing.json"]
    finally:
        os.chmod(folder, stat.S_IRWXU)
