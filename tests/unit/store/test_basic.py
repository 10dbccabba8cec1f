"""The vertical slice: append, read, lookups, offsets and a clean restart."""

from __future__ import annotations

import threading

import pytest

from storage_node.errors import (
    InvalidArgument,
    InvalidBatch,
    InvalidName,
    MessageTooLarge,
    NotFound,
    OffsetOutOfRange,
    TopicConflict,
    UnknownTopic,
)
from storage_node.store import MessageIn, Store, TopicConfig, partition_for_key


def test_append_read_roundtrip(store):
    res = store.append("orders", [MessageIn(b"a", key="k1", tag="t1"), MessageIn(b"b", key="k1")])
    assert [r.partition for r in res] == [partition_for_key("k1", 3)] * 2
    assert [r.offset for r in res] == [0, 1]
    out = store.read("orders", res[0].partition, 0)
    assert [m.value for m in out.messages] == [b"a", b"b"]
    assert out.next_offset == 2
    assert out.messages[0].tag == "t1" and out.messages[1].tag is None
    assert out.messages[0].msg_id == res[0].msg_id
    assert store.read("orders", res[0].partition, 2).messages == []


def test_an_empty_key_is_refused_and_nothing_is_written(store):
    """An empty key could never be looked up: refused (formats/limits.py), not stored."""
    with pytest.raises(InvalidBatch, match="message 0: a key must not be empty") as refused:
        store.append("orders", [MessageIn(b"x", key="", partition=0), MessageIn(b"y")])
    assert refused.value.details["index"] == 0
    assert store.read("orders", 0, 0).messages == []
    store.append("orders", [MessageIn(b"x", key="k", partition=0), MessageIn(b"y", partition=0)])
    msgs = store.read("orders", 0, 0).messages
    assert msgs[0].key == "k" and msgs[1].key is None


def test_lookup_key_newest_first_and_limit(store):
    for i in range(5):
        store.append(
            "orders", [MessageIn(f"v{i}".encode(), key="same"), MessageIn(b"o", key=f"other{i}")]
        )
    got = store.lookup_key("orders", "same", max_count=10)
    assert [m.value for m in got.messages] == [b"v4", b"v3", b"v2", b"v1", b"v0"]
    assert not got.limit_reached
    got = store.lookup_key("orders", "same", max_count=2)
    assert [m.value for m in got.messages] == [b"v4", b"v3"] and got.limit_reached
    assert store.lookup_key("orders", "missing").messages == []


def test_lookup_time_range(store):
    store.append("orders", [MessageIn(b"1", key="k")])
    ts = store.read("orders", partition_for_key("k", 3), 0).messages[0].store_timestamp
    assert store.lookup_key("orders", "k", begin_ms=ts + 1).messages == []
    assert store.lookup_key("orders", "k", end_ms=ts - 1).messages == []
    assert len(store.lookup_key("orders", "k", begin_ms=ts, end_ms=ts).messages) == 1


def test_get_message_assigned_and_supplied(store):
    res = store.append("orders", [MessageIn(b"n")])
    assert store.get_message(res[0].msg_id).value == b"n"
    ids = [
        "shop.service-0a010101-431699-1000",
        "shop.service-0a010102-431699-5",
        "other-c0a80001-431700-0",
    ]
    store.append("orders", [MessageIn(f"p{i}".encode(), msg_id=m) for i, m in enumerate(ids)])
    for i, m in enumerate(ids):
        got = store.get_message(m)
        assert got.value == f"p{i}".encode() and got.msg_id == m
    with pytest.raises(NotFound):
        store.get_message("shop.service-0a010101-431699-1001")
    for bad in ["nonsense", "a-zz010101-1-1", "../x-0a010101-1-1", "a-0a010101-x-1", ""]:
        with pytest.raises(InvalidArgument):
            store.get_message(bad)


def test_bad_input_writes_nothing(store):
    before = store.partition_offsets("orders")
    end = store.log.end
    with pytest.raises(UnknownTopic):
        store.append("nope", [MessageIn(b"x")])
    with pytest.raises(MessageTooLarge):
        store.append("orders", [MessageIn(b"ok"), MessageIn(b"x" * (256 * 1024 + 1))])
    with pytest.raises(InvalidBatch):
        store.append("orders", [MessageIn(b"ok"), MessageIn("str")])  # type: ignore[arg-type]
    with pytest.raises(InvalidBatch):
        store.append("orders", [MessageIn(b"ok", partition=3)])
    with pytest.raises(InvalidBatch):
        store.append("orders", [MessageIn(b"ok", msg_id="bad-id")])
    with pytest.raises(InvalidBatch):
        store.append("orders", [])
    assert store.partition_offsets("orders") == before and store.log.end == end
    for name in ["../evil", "a/b", "..", ".", "", "x" * 201, "sp ace"]:
        with pytest.raises(InvalidName):
            store.create_topic(TopicConfig(name, 1))
    with pytest.raises(InvalidArgument):
        store.create_topic(TopicConfig("zero", 0))
    assert [t.name for t in store.list_topics()] == ["orders"]


def test_offsets_out_of_range(store):
    store.append("orders", [MessageIn(b"x", partition=1)])
    with pytest.raises(OffsetOutOfRange):
        store.read("orders", 1, 2)
    with pytest.raises(OffsetOutOfRange):
        store.read("orders", 1, -1)
    with pytest.raises(InvalidArgument):
        store.read("orders", 7, 0)
    with pytest.raises(OffsetOutOfRange):
        store.commit_offset("g", "orders", 1, 5)


def test_topic_create_idempotent_and_conflict(store):
    assert store.create_topic(TopicConfig("orders", 3)) is False
    with pytest.raises(TopicConflict):
        store.create_topic(TopicConfig("orders", 4))
    assert store.get_topic("orders").partitions == 3


def test_clean_restart_keeps_everything(config):
    s = Store.open(config)
    s.create_topic(TopicConfig("t", 2))
    res = s.append("t", [MessageIn(f"m{i}".encode(), key=f"k{i % 7}") for i in range(300)])
    s.commit_offset("g1", "t", 0, 3)
    offsets = s.partition_offsets("t")
    s.close()
    s.close()  # idempotent
    s = Store.open(config)
    try:
        assert s.recovery_report["clean"] and s.recovery_report["replayed_records"] == 0
        assert s.partition_offsets("t") == offsets
        assert s.committed_offsets("g1") == {"t": {0: 3}}
        for r in res[::37]:
            assert s.get_message(r.msg_id).offset == r.offset
        assert len(s.lookup_key("t", "k3", max_count=1000).messages) == len(
            [i for i in range(300) if i % 7 == 3]
        )
        more = s.append("t", [MessageIn(b"after")])
        assert more[0].msg_id not in {r.msg_id for r in res}
    finally:
        s.close()


def test_rollover_of_segments_index_and_queue_files(store):
    values = [bytes([i % 251]) * 300 for i in range(1200)]
    res = []
    for i in range(0, 1200, 100):
        res += store.append(
            "orders",
            [
                MessageIn(v, key=f"k{(i + j) % 50}", partition=0)
                for j, v in enumerate(values[i : i + 100])
            ],
        )
    assert len(store.log.starts) > 3
    assert len([f for f in store.list_files() if f.kind == "key_index"]) >= 3
    out, off = [], 0  # read first: the newest queue entries are still in memory
    while True:
        r = store.read("orders", 0, off, max_messages=333)
        if not r.messages:
            break
        out += r.messages
        off = r.next_offset
    assert [m.value for m in out] == values
    assert len(store.lookup_key("orders", "k7", max_count=100).messages) == 24
    store.checkpoint()  # writes the queue entries held in memory
    assert len(store.queue("orders", 0).file_starts) == 12
    assert [m.value for m in store.read("orders", 0, 0, max_messages=1200).messages] == values


def test_read_limits_and_tag_filter(store):
    store.append(
        "orders",
        [MessageIn(b"x" * 100, tag="a" if i % 3 == 0 else "b", partition=2) for i in range(30)],
    )
    r = store.read("orders", 2, 0, max_bytes=250)
    assert len(r.messages) == 2 and r.next_offset == 2
    r = store.read("orders", 2, 0, max_bytes=1)
    assert len(r.messages) == 1
    r = store.read("orders", 2, 0, max_messages=100, tag="a")
    assert [m.offset for m in r.messages] == list(range(0, 30, 3)) and r.next_offset == 30


def test_concurrent_sync_appends_group_commit(config):
    s = Store.open(config)
    s.create_topic(TopicConfig("t", 4))
    errors = []

    def worker(n: int) -> None:
        try:
            for b in range(20):
                s.append(
                    "t", [MessageIn(f"{n}-{b}-{i}".encode(), partition=n % 4) for i in range(10)]
                )
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors
        assert sum(n for _f, n in s.partition_offsets("t")) == 8 * 20 * 10
        assert s.log.stats["fsyncs"] <= 8 * 20  # batches shared fsyncs
    finally:
        s.close()


def test_async_mode_and_submit(tmp_path):
    from tests.unit.store.conftest import small_config

    cfg = small_config(tmp_path / "d", flush_mode="async")
    s = Store.open(cfg)
    s.create_topic(TopicConfig("t", 1))
    fut = s.submit("t", [MessageIn(b"f", key="kk")])
    res = fut.result()
    assert s.read("t", 0, 0).messages[0].value == b"f"  # from the cache or the file
    assert s.get_message(res[0].msg_id).value == b"f"
    s.close()
    s = Store.open(cfg)
    assert s.read("t", 0, 0).messages[0].value == b"f"
    s.close()


def test_offset_for_timestamp(store):
    store.append("orders", [MessageIn(b"a", partition=0)])
    t0 = store.read("orders", 0, 0).messages[0].store_timestamp
    assert store.offset_for_timestamp("orders", 0, 0) == 0
    assert store.offset_for_timestamp("orders", 0, t0 + 10**9) == 1


def test_idempotent_batches_across_restart(config):
    s = Store.open(config)
    s.create_topic(TopicConfig("t", 1))
    first = s.append("t", [MessageIn(b"once")], producer_id="p1", sequence=7)
    again = s.append("t", [MessageIn(b"once")], producer_id="p1", sequence=7)
    assert again == first and s.partition_offsets("t") == [(0, 1)]
    s.close()
    s = Store.open(config)
    try:
        assert s.append("t", [MessageIn(b"once")], producer_id="p1", sequence=7) == first
        assert s.partition_offsets("t") == [(0, 1)]
        with pytest.raises(InvalidName):
            s.append("t", [MessageIn(b"x")], producer_id="../p", sequence=1)
    finally:
        s.close()


def test_data_dir_locked(config, store):
    with pytest.raises(Exception, match="in use"):
        Store.open(config)


def test_duplicate_supplied_message_id_refused(store):
    from storage_node.errors import DuplicateMessageId

    mid = "shop-0a010101-431699-7"
    first = store.append("orders", [MessageIn(b"first", msg_id=mid)], "prod-a", 0)
    end = store.log.end
    with pytest.raises(DuplicateMessageId) as info:  # another batch with a taken ID: 409
        store.append("orders", [MessageIn(b"other", msg_id=mid)], "prod-b", 0)
    assert info.value.status == 409 and info.value.details["msg_id"] == mid
    with pytest.raises(DuplicateMessageId):  # twice in one batch
        store.append(
            "orders",
            [MessageIn(b"a", msg_id=mid[:-1] + "8"), MessageIn(b"b", msg_id=mid[:-1] + "8")],
        )
    assert store.log.end == end  # nothing written
    # the idempotent retry of the first batch answers the first result
    assert store.append("orders", [MessageIn(b"first", msg_id=mid)], "prod-a", 0) == first
    assert store.get_message(mid).value == b"first"
    # a non-canonical spelling of an ID is refused, never stored beside the canonical one
    for odd in ["shop-0A010101-431699-9", "shop-0a010101-431699-09"]:
        with pytest.raises(InvalidBatch):
            store.append("orders", [MessageIn(b"x", msg_id=odd)])
        with pytest.raises(NotFound):
            store.get_message(odd)
    # a supplied ID in this node's own numbering is never handed out again by the node
    own = store.append("orders", [MessageIn(b"n")])[0].msg_id
    app, iphex, hour, seq = own.rsplit("-", 3)
    ahead = f"{app}-{iphex}-{hour}-{int(seq) + 1}"
    store.append("orders", [MessageIn(b"ahead", msg_id=ahead)])
    nxt = store.append("orders", [MessageIn(b"next")])[0].msg_id
    assert nxt != ahead and store.get_message(ahead).value == b"ahead"
    assert store.get_message(nxt).value == b"next"
