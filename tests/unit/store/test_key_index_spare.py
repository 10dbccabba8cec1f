"""The next key-index file is made ahead of need: the append that needs a new file takes it
(a rename, no new file or mapping), the maintenance thread makes the next one, and neither a
crash nor a clean close leaves one behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

from storage_node.store import Store, TopicConfig

from .conftest import small_config


def unsealed_index(root: Path) -> Path:
    return root / "index" / "unsealed"


def spares(root: Path) -> list[str]:
    return sorted(p.name for p in unsealed_index(root).glob("*.tmp"))


def index_files(root: Path) -> list[str]:
    return sorted(p.name for p in unsealed_index(root).iterdir() if not p.name.endswith(".tmp"))


def wait_for_spare(root: Path, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while not spares(root) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert spares(root), "the maintenance thread made no new spare"
    return spares(root)[0]


def test_open_makes_a_spare_and_close_removes_it(tmp_path) -> None:
    root = tmp_path / "data"
    store = Store.open(small_config(root))
    assert len(spares(root)) == 1 and index_files(root) == []
    store.close()
    assert spares(root) == [] and index_files(root) == []


def test_a_new_index_file_is_the_spare_renamed(tmp_path) -> None:
    root = tmp_path / "data"
    with Store.open(small_config(root, index_items=500)) as store:
        store.create_topic(TopicConfig("orders", 3))
        first_spare = unsealed_index(root) / spares(root)[0]
        inode = first_spare.stat().st_ino
        written = store.append_columns(
            "orders", [b"a%d" % i for i in range(300)], [f"k{i}" for i in range(300)]
        )
        [name] = index_files(root)
        assert (unsealed_index(root) / name).stat().st_ino == inode
        assert not first_spare.exists()

        second = unsealed_index(root) / wait_for_spare(root)
        inode = second.stat().st_ino
        more = store.append_columns(
            "orders", [b"b%d" % i for i in range(400)], [f"m{i}" for i in range(400)]
        )
        names = index_files(root)
        assert len(names) == 2 and (unsealed_index(root) / names[-1]).stat().st_ino == inode
        wait_for_spare(root)

        for prefix, values, result in (("k", 300, written), ("m", 400, more)):
            for i in range(values):
                [found] = store.lookup_key("orders", f"{prefix}{i}").messages
                assert found.msg_id == result.msg_ids[i]
                assert found.value == (b"a%d" if prefix == "k" else b"b%d") % i


def test_recovery_deletes_a_spare_left_by_a_crash(tmp_path) -> None:
    root = tmp_path / "data"
    Store.open(small_config(root)).close()
    leftover = unsealed_index(root) / "spare-7.tmp"  # a crashed process's spare
    leftover.write_bytes(b"\0" * 4096)
    with Store.open(small_config(root)) as store:
        assert str(leftover) in {
            os.path.abspath(p) for p in store.recovery_report["temporaries_removed"]
        }
        assert spares(root) != ["spare-7.tmp"] and len(spares(root)) == 1
        store.create_topic(TopicConfig("orders", 1))
        store.append_columns("orders", [b"v"], ["key"])
        assert store.lookup_key("orders", "key").messages[0].value == b"v"
