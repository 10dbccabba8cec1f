"""The columnar append: same validation, results, durability and idempotency as ``append``."""

from __future__ import annotations

import pytest

from storage_node.errors import InvalidBatch, MessageTooLarge, NotOwner
from storage_node.store import AppendColumns, MessageIn, Store
from storage_node.store.types import AppendResult


def test_columns_land_like_messages(store: Store) -> None:
    values = [b"v%d" % i for i in range(50)]
    keys = [f"k{i % 7}" if i % 3 else None for i in range(50)]
    tags = ["t" if i % 2 else None for i in range(50)]
    done = store.append_columns("orders", values, keys, tags)
    assert isinstance(done, AppendColumns)
    assert len(done) == 50 and len(set(done.msg_ids)) == 50
    for i in range(50):
        msg = store.get_message(done.msg_ids[i])
        assert (msg.value, msg.key, msg.tag) == (values[i], keys[i], tags[i])
        assert (msg.partition, msg.offset) == (done.partitions[i], done.offsets[i])
    via_messages = store.append(
        "orders", [MessageIn(v, k, t) for v, k, t in zip(values, keys, tags, strict=True)]
    )
    keyed = [i for i in range(50) if keys[i] is not None]
    # a key always maps to the same partition through either entry point
    assert [done.partitions[i] for i in keyed] == [via_messages[i].partition for i in keyed]
    found = store.lookup_key("orders", "k1").messages
    assert {m.msg_id for m in found} >= {done.msg_ids[i] for i in keyed if keys[i] == "k1"}


def test_given_ids_timestamps_and_partitions(store: Store) -> None:
    done = store.append_columns(
        "orders",
        [b"a", b"b"],
        msg_ids=["app-0a000001-400000-7", None],
        timestamps=[1234, None],
        partitions=[2, 0],
    )
    assert done.partitions == [2, 0]
    assert done.msg_ids[0] == "app-0a000001-400000-7"
    first = store.get_message(done.msg_ids[0])
    assert (first.timestamp, first.partition, first.value) == (1234, 2, b"a")
    second = store.get_message(done.msg_ids[1])
    assert second.timestamp == second.store_timestamp


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"values": []}, InvalidBatch),
        ({"values": [b"x", "not bytes"]}, InvalidBatch),
        ({"values": [b"x", b"y"], "keys": ["only one"]}, InvalidBatch),
        ({"values": [b"x"], "keys": [7]}, InvalidBatch),
        ({"values": [b"x"], "partitions": [3]}, InvalidBatch),
        ({"values": [b"x"], "msg_ids": ["not an id"]}, InvalidBatch),
        ({"values": [b"x"], "timestamps": [-5]}, InvalidBatch),
        ({"values": [b"x" * (256 * 1024 + 1)]}, MessageTooLarge),
        ({"values": [b"x"], "partitions": [1], "partitions_allowed": [0]}, NotOwner),
    ],
)
def test_bad_batches_change_nothing(store: Store, kwargs: dict, error: type) -> None:
    before = store.partition_offsets("orders")
    with pytest.raises(error):
        store.append_columns("orders", **kwargs)
    assert store.partition_offsets("orders") == before
    assert store.counters["appended_messages"] == 0


def test_duplicate_sequence_returns_first_results(store: Store) -> None:
    first = store.append_columns("orders", [b"a", b"b"], producer_id="p1", sequence=9)
    again = store.append_columns("orders", [b"a", b"b"], producer_id="p1", sequence=9)
    assert again == first
    assert store.counters["duplicate_batches"] == 1
    assert sum(n for _f, n in store.partition_offsets("orders")) == 2
    # the same (producer, sequence) through append gets the same results as objects
    assert store.append("orders", [MessageIn(b"a"), MessageIn(b"b")], "p1", 9) == [
        AppendResult(p, o, m)
        for p, o, m in zip(first.partitions, first.offsets, first.msg_ids, strict=True)
    ]


def test_submit_columns_and_reopen(config, store: Store) -> None:
    done = store.submit_columns("orders", [b"x"] * 10, ["same"] * 10).result()
    assert len(set(done.partitions)) == 1 and done.offsets == list(range(10))
    store.close()
    with Store.open(config) as reopened:
        assert [m.value for m in reopened.lookup_key("orders", "same").messages] == [b"x"] * 10


def test_large_values_written_as_pieces_read_back(config, store: Store) -> None:
    """Batches of large values go to disk from their own bytes (gathering write), also when
    a batch crosses a segment boundary (64 KiB segments here); every read sees them whole."""
    values = [bytes([i % 251]) * (3000 + i) for i in range(60)]
    sent = []
    for start in range(0, 60, 12):
        done = store.append_columns("orders", values[start : start + 12], ["big"] * 12)
        sent += done.msg_ids
    assert [store.get_message(m).value for m in sent] == values  # partly from the write cache
    store.log.flush()
    store.close()
    with Store.open(config) as reopened:
        assert [reopened.get_message(m).value for m in sent] == values
        found = reopened.lookup_key("orders", "big", max_count=100).messages
        assert [m.value for m in found] == values[::-1]
        assert reopened.recovery_report.get("truncated_bytes", 0) == 0
