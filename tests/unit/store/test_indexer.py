"""One indexer for appended, copied and replayed frames: indexing the log again from
nothing gives byte for byte the indexes the appends wrote, and a message ID the indexer
cannot parse is counted in the recovery report, never dropped unseen."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np

from storage_node.formats import filenames as fn
from storage_node.formats.packed import PackedColumn
from storage_node.formats.record import encode_frames
from storage_node.store import Store, StoreConfig, TopicConfig
from storage_node.store.indexer import partition_runs

from .conftest import small_config


def _fill(store: Store) -> tuple[list[str], list[int]]:
    """Batches of every shape the append path indexes; returns some message IDs and the
    offsets of the idempotent batch (producer p, sequence 6)."""
    store.create_topic(TopicConfig("orders", 3))
    ids: list[str] = []
    offsets: list[int] = []
    for i in range(9):
        done = store.append_columns(
            "orders",
            [b"v%d-%d" % (i, j) for j in range(40)],
            keys=[f"k{j % 7}" if j % 3 else None for j in range(40)],
            tags=["red" if j % 4 == 0 else None for j in range(40)],
            partitions=[j % 3 if i % 2 else None for j in range(40)],
            producer_id="p" if i % 3 == 0 else None,
            sequence=i if i % 3 == 0 else None,
        )
        ids.extend(done.msg_ids[:2])
        if i == 6:
            offsets = list(done.offsets)
    given = [f"orders-0a000001-{480000 + j}-{j}" for j in range(5)]
    store.append_columns("orders", [b"g%d" % j for j in range(5)], msg_ids=given)
    store.append_columns(
        "orders", [b"m0", b"m1"], msg_ids=[None, "orders-0a000002-480001-9"], partitions=[1, 1]
    )
    return ids + given + ["orders-0a000002-480001-9"], offsets


def _queue_bytes(root: Path) -> dict[str, bytes]:
    out = {}
    queues = root / fn.QUEUES_DIR
    for dirpath, _dirs, files in os.walk(queues):
        for name in files:
            path = Path(dirpath) / name
            out[str(path.relative_to(queues))] = path.read_bytes()
    return out


def test_replaying_the_whole_log_rebuilds_exactly_what_the_appends_indexed(tmp_path):
    config = small_config(tmp_path / "live")
    store = Store.open(config)
    ids, batch_offsets = _fill(store)
    expected_keys = {k: store.lookup_key("orders", k).messages for k in ("k1", "k2", "k6")}
    expected_ids = {m: store.get_message(m) for m in ids}
    store.close()
    appended = _queue_bytes(tmp_path / "live")

    image = tmp_path / "image"  # the same log, every derived index gone
    shutil.copytree(tmp_path / "live", image)
    for name in (fn.QUEUES_DIR, fn.KEY_INDEX_DIR, fn.MSGID_DIR):
        shutil.rmtree(image / name)
    for name in (fn.CHECKPOINT, fn.PRODUCERS):
        os.remove(image / name)
    store = Store.open(StoreConfig(**{**config.__dict__, "data_dir": str(image)}))
    try:
        report = store.recovery_report
        assert report["replayed_from"] == 0 and report["replayed_records"] == 9 * 40 + 7
        assert report["unparsed_msg_ids"] == 0
        assert _queue_bytes(image) == appended
        for key, messages in expected_keys.items():
            assert store.lookup_key("orders", key).messages == messages
        for mid, message in expected_ids.items():
            assert store.get_message(mid) == message
        # the idempotency table came back from the producer fields of the frames
        again = store.append_columns("orders", [b"x"] * 40, producer_id="p", sequence=6)
        assert list(again.offsets) == batch_offsets
        assert store.stats()["duplicate_batches"] == 1
    finally:
        store.close()


def test_partition_runs_keep_the_order_of_each_partition():
    order, runs = partition_runs(np.array([2, 0, 2, 1, 0], dtype=np.int64))
    assert order is not None and order.tolist() == [1, 4, 3, 0, 2]
    assert runs == [(0, 0, 2), (1, 2, 3), (2, 3, 5)]
    assert partition_runs(np.array([4, 4], dtype=np.int64)) == (None, [(4, 0, 2)])


def test_a_message_id_recovery_cannot_parse_is_counted_and_logged(tmp_path, caplog):
    config = small_config(tmp_path / "live")
    store = Store.open(config)
    store.create_topic(TopicConfig("orders", 1))
    store.append_columns("orders", [b"a", b"b"])
    store.checkpoint()
    # frames whose ID column holds text no ID parses from (as a log written by a build with
    # another ID rule might): written to the log directly, past the checkpoint
    with store._lock:
        start = store.queue("orders", 0).next_offset
        encoded = encode_frames(
            b"orders",
            np.zeros(3, dtype=np.int64),
            np.arange(start, start + 3, dtype=np.int64),
            0,
            store.last_store_ms,
            PackedColumn.of_bytes([None] * 3),
            PackedColumn.of_bytes([None] * 3),
            PackedColumn.of_bytes([b"not an id", b"neither", b"orders-zz-1-1"]),
            PackedColumn.of_bytes([b"x", b"y", b"z"]),
        )
        store.log.append(encoded.pieces, encoded.frame_sizes)
    store.log.flush()
    image = tmp_path / "image"
    shutil.copytree(tmp_path / "live", image)  # a crash image: replayed from the checkpoint
    store.close()
    with caplog.at_level(logging.WARNING, logger="storage_node.store.indexer"):
        store = Store.open(StoreConfig(**{**config.__dict__, "data_dir": str(image)}))
    try:
        report = store.recovery_report
        assert report["replayed_records"] == 3
        assert report["unparsed_msg_ids"] == 3
        assert "3 message IDs of topic orders" in caplog.text
        # the records themselves are indexed by offset as before
        assert [m.value for m in store.read("orders", 0, start).messages] == [b"x", b"y", b"z"]
    finally:
        store.close()
