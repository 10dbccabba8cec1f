"""The small parts the Store is a façade over: directory lock, lazy pools, consumer groups,
partition offsets and the rebuildable Parts (real files, a real store)."""

from __future__ import annotations

import threading

import pytest

from storage_node.errors import InvalidName, OffsetOutOfRange, Unavailable, UnknownTopic
from storage_node.store import Store, TopicConfig
from storage_node.store.directory_lock import DirectoryLock
from storage_node.store.pools import LazyPool

from .conftest import small_config


def test_one_lock_per_directory(tmp_path):
    first = DirectoryLock(str(tmp_path))
    with pytest.raises(Unavailable, match="in use by another store"):
        DirectoryLock(str(tmp_path))
    first.release()
    first.release()  # idempotent
    DirectoryLock(str(tmp_path)).release()


def test_a_store_holds_its_directory(config):
    store = Store.open(config)
    try:
        with pytest.raises(Unavailable, match="in use"):
            Store.open(config)
    finally:
        store.close()
    Store.open(config).close()


def test_lazy_pool_starts_on_first_use_and_again_after_shutdown():
    pool = LazyPool(2, "test-pool")
    before = {t.name for t in threading.enumerate()}
    pool.shutdown()  # nothing started: nothing to stop
    assert not any(n.startswith("test-pool") for n in before)
    first = pool.get()
    assert pool.get() is first
    assert first.submit(threading.current_thread).result().name.startswith("test-pool")
    pool.shutdown()
    with pytest.raises(RuntimeError):
        first.submit(int)
    second = pool.get()
    assert second is not first and second.submit(int, "7").result() == 7
    pool.shutdown()


def test_consumer_group_commits_are_checked_and_a_bad_one_changes_nothing(config):
    store = Store.open(config)
    try:
        store.create_topic(TopicConfig("orders", 2))
        store.append_columns("orders", [b"a", b"b"], partitions=[0, 0])
        store.commit_offset("g1", "orders", 0, 2)
        for bad, error in (
            (("../g", "orders", 0, 1), InvalidName),
            (("g1", "orders", 0, 3), OffsetOutOfRange),
            (("g1", "orders", 2, 0), Exception),
            (("g1", "missing", 0, 0), UnknownTopic),
            (("g1", "orders", 0, -1), Exception),
        ):
            with pytest.raises(error):
                store.commit_offset(*bad)
        assert store.committed_offsets("g1") == {"orders": {0: 2}}
        assert store.consumer_groups() == ["g1"]
        with pytest.raises(UnknownTopic):
            store.committed_offsets("g1", "missing")
    finally:
        store.close()
    with Store.open(config) as again:
        assert again.committed_offsets("g1", "orders") == {"orders": {0: 2}}


def test_partition_offsets(config):
    with Store.open(config) as store:
        store.create_topic(TopicConfig("orders", 3))
        assert store.partition_offsets("orders") == [(0, 0)] * 3
        store.append_columns("orders", [b"a", b"b", b"c"], partitions=[2, 0, 2])
        assert store.partition_offsets("orders") == [(0, 1), (0, 0), (0, 2)]
        with pytest.raises(UnknownTopic):
            store.partition_offsets("missing")


def test_rebuilt_parts_recover_what_the_log_holds(tmp_path):
    """A rebuild (what a failed write leads to) closes the old parts and loads new ones
    from disk: every acknowledged message is there, and appends go on."""
    store = Store.open(small_config(tmp_path / "d", flush_mode="sync"))
    try:
        store.create_topic(TopicConfig("orders", 1))
        store.append_columns("orders", [b"x%d" % i for i in range(50)])
        old = store.parts
        last_ms = store.last_store_ms
        with store._lock:
            store._use(old.rebuilt())
            store.parts.reload(Unavailable("unused"))
        assert store.parts is not old and store.log is store.parts.log
        assert store.last_store_ms >= last_ms
        assert store.recovery_report  # the new load reported what it did
        got = store.read("orders", 0, 0, 100).messages
        assert [m.value for m in got] == [b"x%d" % i for i in range(50)]
        store.append_columns("orders", [b"after"])
        assert store.read("orders", 0, 50, 10).messages[0].value == b"after"
    finally:
        store.close()


def test_submit_after_close_is_refused(config):
    store = Store.open(config)
    store.create_topic(TopicConfig("orders", 1))
    assert store.submit_columns("orders", [b"a"]).result().offsets == [0]
    store.close()
    with pytest.raises(Unavailable):
        store.submit_columns("orders", [b"b"])
