"""backend.files.atomic_write, the one atomic replacement of a file: the store's files, and the
routing and access files (a temporary named for the process and thread, and their modes)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from storage_node.access.access_file import read_access_file, write_access_file
from storage_node.access.document import AccessDocument
from storage_node.backend.files import atomic_write


def test_a_replacement_writes_the_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = str(tmp_path / "f")
    atomic_write(path, b"old")
    atomic_write(path, [b"n", b"ew"], mode=0o600)  # the mode of the new file
    assert Path(path).read_bytes() == b"new"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(tmp_path) == ["f"]


def test_writers_at_once_each_write_a_whole_file(tmp_path: Path) -> None:
    """Threads replacing one file with ``unique`` temporaries: every read sees one whole
    version (with one shared ``.tmp`` name they would write into each other's file)."""
    path = str(tmp_path / "shared.json")
    versions = [bytes([65 + i]) * 50_000 for i in range(8)]
    seen: list[bytes] = []

    def write(data: bytes) -> None:
        for _ in range(20):
            atomic_write(path, data, unique=True)
            seen.append(Path(path).read_bytes())

    threads = [threading.Thread(target=write, args=(v,)) for v in versions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(seen) <= set(versions) and len(seen) == 160
    assert os.listdir(tmp_path) == ["shared.json"]


def test_the_access_file_is_written_through_it_0600(tmp_path: Path) -> None:
    path = tmp_path / "access.json"
    write_access_file(path, AccessDocument())
    assert read_access_file(path) == AccessDocument()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["access.json"]
