"""The names of a data directory come from one module (formats/filenames.py), and they are
the names a store really writes: old directories stay readable."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from storage_node.formats import filenames as fn
from storage_node.formats.filenames import State
from storage_node.store import Store, TopicConfig
from storage_node.store.config import StoreConfig

REPO = Path(__file__).resolve().parents[3]
# the modules whose string literals must not spell a lifecycle folder or a file of the layout
ENGINE_DIRS = [REPO / "storage_node" / "store", REPO / "storage_node" / "formats"]
OWNED = {
    "unsealed",
    "sealed",
    "compacted",
    "uploaded",
    "checkpoint",
    "topics.json",
    "producers.json",
    "commitlog",
    "msgid",
    "queues",
    "objects",
    "log.json",
    "leader-epochs.json",
    "LOCK",
}
# (module, literal) that spell such a word as something else than a name on disk
NOT_NAMES = {("lifecycle.py", "uploaded")}  # the maintenance report's count of uploads


def test_the_names_are_those_of_the_on_disk_layout():
    assert [str(s) for s in fn.FOLDERS] == ["unsealed", "compacted", "uploaded"]
    assert [str(s) for s in fn.STATES] == ["unsealed", "sealed", "compacted", "uploaded"]
    assert f"{State.COMPACTED}" == "compacted" and State("uploaded") is State.UPLOADED
    assert fn.segment_name(4096) == "00000000000000004096"
    assert fn.parse_segment_name("00000000000000004096") == 4096
    assert fn.parse_segment_name("4096") is None and fn.parse_segment_name("x" * 20) is None
    name = fn.index_file_name(1_700_000_000_000, 77)
    assert name == "1700000000000-00000000000000000077"
    assert fn.is_index_name(name) and fn.name_begin_pos(name) == 77
    assert not fn.is_index_name(fn.spare_index_name(3))
    assert fn.spare_index_name(3).endswith(".tmp")  # recovery removes a leftover spare
    assert fn.hour_folder(0) == "1970010100"
    assert fn.object_key("segment", "n") == "commitlog/n"
    assert fn.object_key("key_index", "n") == "index/n"


def test_a_store_writes_exactly_the_layout_the_module_names(tmp_path):
    store = Store.open(StoreConfig(data_dir=str(tmp_path), flush_mode="sync"))
    try:
        store.create_topic(TopicConfig("t", partitions=1))
        store.append_columns("t", [b"v"], keys=["k"])
        store.commit_offset("g", "t", 0, 1)
        store.checkpoint(clean=False)
    finally:
        store.close()
    top = set(os.listdir(tmp_path))
    assert {fn.LOCK, fn.CHECKPOINT, fn.TOPICS, fn.OFFSETS_DIR, fn.COMMITLOG_DIR} <= top
    assert {fn.KEY_INDEX_DIR, fn.MSGID_DIR, fn.QUEUES_DIR} <= top
    for kind in (fn.COMMITLOG_DIR, fn.KEY_INDEX_DIR):
        assert set(os.listdir(tmp_path / kind)) == {str(s) for s in fn.FOLDERS}
    segments = os.listdir(tmp_path / fn.COMMITLOG_DIR / State.UNSEALED)
    assert segments and all(fn.parse_segment_name(s) is not None for s in segments)
    indexes = os.listdir(tmp_path / fn.KEY_INDEX_DIR / State.UNSEALED)
    assert indexes and all(fn.is_index_name(n) for n in indexes)
    assert os.listdir(tmp_path / fn.OFFSETS_DIR) == [fn.group_file_name("g")]
    queue = tmp_path / fn.QUEUES_DIR / "t" / "0"
    assert [fn.parse_queue_file_name(n) for n in os.listdir(queue)] == [0]


def test_no_engine_module_but_filenames_spells_a_layout_name():
    """A folder or file name written as a literal elsewhere would drift from the layout."""
    found = []
    for root in ENGINE_DIRS:
        for path in sorted(root.glob("*.py")):
            if path.name == "filenames.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Constant)
                    and node.value in OWNED
                    and (path.name, node.value) not in NOT_NAMES
                ):
                    found.append(f"{path.name}:{node.lineno} {node.value!r}")
    assert found == []
