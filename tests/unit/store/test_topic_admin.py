"""Deleting topics and adding partitions in the engine: nothing of a deleted topic is served
again (by offset, key, message ID or time), not after a restart, a crash or a re-creation;
partitions only grow, and old keys stay findable."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from storage_node.errors import InvalidArgument, InvalidName, NotFound, UnknownTopic
from storage_node.formats.limits import MAX_PARTITIONS
from storage_node.store import MessageIn, Store, TopicConfig, partition_for_key
from tests.unit.store.conftest import small_config


def _fill(s: Store, topic: str, n: int, tag: str = "old") -> list:
    return s.append(topic, [MessageIn(f"{tag}-{i}".encode(), key=f"k{i % 7}") for i in range(n)])


def _snapshot(s: Store) -> str:
    """Everything a topic command could change, as one comparable string."""
    state = {
        t.name: [t.partitions, s.partition_offsets(t.name), s.committed_offsets("g", t.name)]
        for t in s.list_topics()
    }
    return json.dumps(state, sort_keys=True, default=str)


def _gone(s: Store, topic: str, ids: list[str]) -> None:
    assert topic not in [t.name for t in s.list_topics()]
    for mid in ids:
        with pytest.raises(NotFound):
            s.get_message(mid)
    with pytest.raises(UnknownTopic):
        s.read(topic, 0, 0)
    with pytest.raises(UnknownTopic):
        s.lookup_key(topic, "k1")
    with pytest.raises(UnknownTopic):
        s.offset_for_timestamp(topic, 0, 0)
    with pytest.raises(UnknownTopic):
        s.committed_offsets("g", topic)


def test_delete_hides_everything_and_recreate_starts_empty(config):
    with Store.open(config) as s:
        s.create_topic(TopicConfig("orders", 3))
        s.create_topic(TopicConfig("other", 1))
        old = _fill(s, "orders", 50)
        kept = s.append("other", [MessageIn(b"stay", key="k1")])
        s.commit_offset("g", "orders", 0, 3)
        s.commit_offset("g", "other", 0, 1)
        s.commit_offset("only-orders", "orders", 1, 2)
        s.delete_topic("orders")
        ids = [r.msg_id for r in old]
        _gone(s, "orders", ids)
        assert s.consumer_groups() == ["g"]  # the group with nothing left went away
        assert s.committed_offsets("g") == {"other": {0: 1}}
        assert s.get_message(kept[0].msg_id).value == b"stay"
        # the same name again: empty, offsets from 0, old keys and IDs not found
        s.create_topic(TopicConfig("orders", 2))
        assert s.partition_offsets("orders") == [(0, 0), (0, 0)]
        assert s.lookup_key("orders", "k1").messages == []
        assert s.read("orders", 0, 0).messages == []
        new = s.append("orders", [MessageIn(b"new", key="k1")])
        assert new[0].offset == 0 and new[0].msg_id not in ids
        assert [m.value for m in s.lookup_key("orders", "k1").messages] == [b"new"]
        for mid in ids:
            with pytest.raises(NotFound):
                s.get_message(mid)
    with Store.open(config) as s:  # clean restart: still only the new incarnation
        assert s.partition_offsets("orders") == [(0, 1), (0, 0)] or s.partition_offsets(
            "orders"
        ) == [(0, 0), (0, 1)]
        assert [m.value for m in s.lookup_key("orders", "k1").messages] == [b"new"]
        for mid in ids:
            with pytest.raises(NotFound):
                s.get_message(mid)
        assert s.committed_offsets("g") == {"other": {0: 1}}


def test_a_deleted_message_id_may_be_given_again(config):
    with Store.open(config) as s:
        s.create_topic(TopicConfig("a", 1))
        mid = "app-0a000001-480000-7"
        s.append("a", [MessageIn(b"first", msg_id=mid)])
        s.delete_topic("a")
        with pytest.raises(NotFound):
            s.get_message(mid)
        s.create_topic(TopicConfig("a", 1))
        s.append("a", [MessageIn(b"second", msg_id=mid)])
        assert s.get_message(mid).value == b"second"


def test_unknown_and_bad_names_change_nothing(store):
    _fill(store, "orders", 10)
    store.commit_offset("g", "orders", 0, 1)
    before = _snapshot(store)
    with pytest.raises(UnknownTopic):
        store.delete_topic("nope")
    for bad in ("", "..", "a/b", "x" * 201):
        with pytest.raises((UnknownTopic, InvalidName)):
            store.delete_topic(bad)
    with pytest.raises(UnknownTopic):
        store.add_partitions("nope", 4)
    for count in (2, 0, -1, MAX_PARTITIONS + 1, True, "4", 2.0):
        with pytest.raises(InvalidArgument):
            store.add_partitions("orders", count)  # type: ignore[arg-type]
    assert _snapshot(store) == before
    with open(os.path.join(store.root, "topics.json")) as fh:
        assert json.load(fh)["deleted"] == {}


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from storage_node.store import MessageIn, Store, TopicConfig
    from tests.unit.store.conftest import small_config
    s = Store.open(small_config(sys.argv[1]))
    s.create_topic(TopicConfig("t", 2))
    old = s.append("t", [MessageIn(b"old-%d" % i, key="k%d" % (i % 5)) for i in range(300)])
    s.checkpoint()
    old += s.append("t", [MessageIn(b"old-late-%d" % i, key="k1") for i in range(20)])
    print(" ".join(r.msg_id for r in old), flush=True)
    if sys.argv[2] == "recreate-unchecked":  # killed before any checkpoint after the delete
        s.checkpoint = lambda clean=False: None
    s.delete_topic("t")
    if sys.argv[2].startswith("recreate"):
        s.create_topic(TopicConfig("t", 3))
        s.append("t", [MessageIn(b"new-%d" % i, key="k1") for i in range(4)])
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("then", ["nothing", "recreate", "recreate-unchecked"])
def test_sigkill_after_delete_does_not_bring_the_topic_back(tmp_path, then):
    d = str(tmp_path / "d")
    root = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    )
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, d, then],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    ids = proc.stdout.split()
    assert len(ids) == 320
    with Store.open(small_config(d)) as s:
        assert not s.recovery_report["clean"]
        if then == "recreate-unchecked":  # the old records past the checkpoint were replayed
            assert s.recovery_report["replayed_records"] >= 24
        if then == "nothing":
            _gone(s, "t", ids)
            return
        assert s.get_topic("t").partitions == 3
        offsets = s.partition_offsets("t")
        assert sum(n - f for f, n in offsets) == 4 and all(f == 0 for f, _ in offsets)
        p = partition_for_key("k1", 3)
        assert [m.value for m in s.read("t", p, 0).messages] == [b"new-%d" % i for i in range(4)]
        assert sorted(m.value for m in s.lookup_key("t", "k1").messages) == sorted(
            b"new-%d" % i for i in range(4)
        )
        for mid in ids:
            with pytest.raises(NotFound):
                s.get_message(mid)


def test_leftovers_of_an_interrupted_delete_are_removed(config):
    """A crash after the registry rewrite but before the queue folders and offsets went."""
    with Store.open(config) as s:
        s.create_topic(TopicConfig("t", 2))
        _fill(s, "t", 20)
        s.commit_offset("g", "t", 0, 5)
        s.topics.delete("t", s.log.end)  # only the first step of delete_topic
    with Store.open(config) as s:
        assert s.recovery_report["deleted_topics_purged"] == ["t"]
        assert not os.path.exists(os.path.join(s.root, "queues", "t"))
        assert s.consumer_groups() == []
        s.create_topic(TopicConfig("t", 2))
        assert s.partition_offsets("t") == [(0, 0), (0, 0)]


def test_tombstones_go_once_retention_removed_the_old_records(config):
    with Store.open(config) as s:
        s.create_topic(TopicConfig("t", 1))
        _fill(s, "t", 10)
        s.delete_topic("t")
        assert "t" in s.topics.deleted
        assert s.topics.forget_tombstones(s.log.start_pos) == []  # old records still there
        assert s.topics.forget_tombstones(s.log.end) == ["t"]
    with Store.open(config) as s:
        assert s.topics.deleted == {}


def test_old_topics_file_format_is_read(config):
    os.makedirs(config.data_dir, exist_ok=True)
    old = {"x": {"partitions": 2, "compression": "none", "retention_hours": 5.0}}
    with open(os.path.join(config.data_dir, "topics.json"), "w") as fh:
        json.dump(old, fh)
    with Store.open(config) as s:
        assert s.get_topic("x") == TopicConfig("x", 2, "none", 5.0)


def test_add_partitions_keeps_data_and_finds_old_keys(config):
    with Store.open(config) as s:
        s.create_topic(TopicConfig("t", 2))
        keys = [f"key-{i}" for i in range(40)]
        before = s.append("t", [MessageIn(b"before " + k.encode(), key=k) for k in keys])
        offsets_before = s.partition_offsets("t")
        assert s.add_partitions("t", 2).partitions == 2  # the same count: nothing changes
        cfg = s.add_partitions("t", 5)
        assert cfg.partitions == 5 and s.get_topic("t").partitions == 5
        assert s.partition_offsets("t")[:2] == offsets_before
        assert s.partition_offsets("t")[2:] == [(0, 0)] * 3
        after = s.append("t", [MessageIn(b"after " + k.encode(), key=k) for k in keys])
        for r, k in zip(after, keys, strict=True):
            assert r.partition == partition_for_key(k, 5)  # new messages: the new count
        for r, k in zip(before, keys, strict=True):
            assert r.partition == partition_for_key(k, 2)
        assert {r.partition for r in after} >= {2, 3, 4}
        for p in (2, 3, 4):
            assert s.read("t", p, 0).messages[0].offset == 0
        for k in keys:  # old and new messages of a key, wherever each went
            assert [m.value for m in s.lookup_key("t", k).messages] == [
                b"after " + k.encode(),
                b"before " + k.encode(),
            ]
        with pytest.raises(InvalidArgument, match="only be added"):
            s.add_partitions("t", 3)
        assert s.get_topic("t").partitions == 5
    with Store.open(config) as s:  # persisted
        assert s.get_topic("t").partitions == 5
        assert sum(n for _, n in s.partition_offsets("t")) == 80
