"""LogLoader on its own: handed the parts of a store directory, it returns what it loaded
(the report, the newest store time) and leaves the parts in line with the log."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from storage_node.backend.objectstore import open_object_store
from storage_node.store import Store, StoreConfig, TopicConfig
from storage_node.store.commitlog import CommitLog
from storage_node.store.dedup import DedupTable
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.msg_id_index import MsgIdIndexes
from storage_node.store.queues import PartitionQueues
from storage_node.store.recovery import Loaded, LogLoader, RecoveryReport
from storage_node.store.topics import TopicRegistry

from .conftest import small_config


class Parts:
    """The parts a store would build over ``root``, handed to a loader."""

    def __init__(self, root: Path, config: StoreConfig) -> None:
        self.log = CommitLog(
            str(root / "commitlog"), config.segment_bytes, "sync", 1000, 1 << 20, 5
        )
        self.keyidx = KeyIndexSet(str(root / "index"), config.index_slots, config.index_items)
        self.msgids = MsgIdIndexes(str(root / "msgid"))
        self.queues = PartitionQueues(str(root / "queues"), config.queue_file_entries)
        self.dedup = DedupTable(str(root / "producers.json"))
        self.topics = TopicRegistry(str(root / "topics.json"))
        self.loader = LogLoader(
            str(root),
            str(root / "checkpoint"),
            self.log,
            self.keyidx,
            self.msgids,
            self.queues,
            self.dedup,
            self.topics,
            open_object_store(str(root / "objects")),
        )

    def close(self) -> None:
        for part in (self.log, self.keyidx, self.msgids, self.queues):
            part.close()


def _write(config: StoreConfig, copy_to: Path | None = None) -> tuple[int, int, int]:
    """A store with 30 checkpointed and 20 later records of ``orders`` (one partition),
    copied while still open (a crash image) when ``copy_to`` is given, else closed
    cleanly. Returns (checkpoint position, log end, last store time)."""
    store = Store.open(config)
    store.create_topic(TopicConfig("orders", 1))
    store.append_columns("orders", [b"a%d" % i for i in range(30)], keys=["k"] * 30)
    ck = store.checkpoint()
    store.append_columns("orders", [b"b%d" % i for i in range(20)], producer_id="p", sequence=1)
    end, last_ms = store.log.end, store.last_store_ms
    if copy_to is not None:
        store.log.flush()
        shutil.copytree(config.data_dir, copy_to)
    store.close()
    return ck.log_end, end, last_ms


def test_a_crash_image_is_replayed_past_the_checkpoint_and_its_torn_tail_cut(tmp_path):
    config = small_config(tmp_path / "live")
    image = tmp_path / "image"
    ck_end, end, last_ms = _write(config, copy_to=image)
    segments = sorted((image / "commitlog" / "unsealed").iterdir())
    with open(segments[-1], "ab") as fh:
        fh.write(b"\x99" * 37)  # a torn write after the last batch
    parts = Parts(image, config)
    try:
        loaded = parts.loader.load()
        assert isinstance(loaded, Loaded) and isinstance(loaded.report, RecoveryReport)
        report = loaded.report
        assert not report.clean
        assert report.truncated_bytes == 37
        assert report.replayed_from == ck_end
        assert report.replayed_records == 20
        assert report.corrupt_records == [] and report.corrupt_files == []
        assert loaded.last_store_ms == last_ms
        assert loaded.checkpoint is not None and loaded.checkpoint.log_end == ck_end
        assert parts.log.end == end
        q = parts.queues.get("orders", 0)
        assert (q.first_offset, q.next_offset) == (0, 50)
        assert parts.dedup.get("p", 1) is not None  # the idempotency entry was replayed
        assert os.path.getsize(segments[-1]) == end - int(segments[-1].name)
        assert report.as_dict()["truncated_bytes"] == 37
    finally:
        parts.close()


def test_a_clean_image_is_not_rescanned(tmp_path):
    config = small_config(tmp_path / "live")
    _ck_end, end, last_ms = _write(config)
    parts = Parts(Path(config.data_dir), config)
    try:
        loaded = parts.loader.load()
        assert loaded.report.clean and loaded.report.replayed_records == 0
        assert loaded.report.truncated_bytes == 0
        assert loaded.last_store_ms == last_ms and parts.log.end == end
        assert parts.queues.get("orders", 0).next_offset == 50
    finally:
        parts.close()


def test_temporaries_and_duplicate_copies_are_reported(tmp_path):
    """A copy of a compacted segment left in unsealed/ (a crash between the atomic move
    and the delete) is deleted, the compacted one kept; a temporary is deleted."""
    config = small_config(tmp_path / "live")
    with Store.open(config) as store:
        store.create_topic(TopicConfig("orders", 1))
        store.append_columns("orders", [b"v%d" % i for i in range(30)])
        store.compact_now()
    root = Path(config.data_dir)
    compacted = sorted((root / "commitlog" / "compacted").iterdir())
    assert compacted
    stray = root / "commitlog" / "unsealed" / compacted[0].name
    shutil.copyfile(compacted[0], stray)
    tmp = root / "index" / "unsealed" / "leftover.tmp"
    tmp.write_bytes(b"half")
    parts = Parts(root, config)
    try:
        report = parts.loader.load().report
        assert str(tmp) in [os.path.abspath(p) for p in report.temporaries_removed]
        assert report.duplicates_removed == [f"unsealed/{compacted[0].name}"]
        assert not tmp.exists() and not stray.exists() and compacted[0].exists()
        assert parts.queues.get("orders", 0).next_offset == 30
    finally:
        parts.close()
