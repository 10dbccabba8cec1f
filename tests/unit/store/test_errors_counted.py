"""Errors the store survives are never swallowed: each is logged and counted in the stats
(the server exports the counts as metrics). Message IDs replay cannot parse are counted in
the recovery report (test_indexer.py)."""

from __future__ import annotations

import logging
import os
import time

from storage_node.formats import filenames as fn
from storage_node.store import Store, TopicConfig

from .conftest import small_config


def _wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.01)


def test_a_failing_on_written_hook_is_counted_and_logged_and_the_write_stands(tmp_path, caplog):
    store = Store.open(small_config(tmp_path / "data", flush_mode="sync"))
    try:
        store.create_topic(TopicConfig("t", 1))
        calls = []

        def hook() -> None:
            calls.append(1)
            raise RuntimeError("waker broke")

        store.log.on_written = hook
        with caplog.at_level(logging.ERROR, logger="storage_node.store.log_flusher"):
            for i in range(3):
                store.append_columns("t", [b"v%d" % i])
            _wait_for(lambda: store.stats()["log_on_written_errors"] >= 3)
        assert store.stats()["log_on_written_errors"] == len(calls)
        assert "on_written hook failed (1 times)" in caplog.text
        assert "waker broke" in caplog.text  # with its traceback
        assert [m.value for m in store.read("t", 0, 0).messages] == [b"v0", b"v1", b"v2"]
    finally:
        store.log.on_written = None
        store.close()


def test_a_segment_whose_age_cannot_be_read_is_counted_and_logged(tmp_path, caplog):
    config = small_config(tmp_path / "data")
    store = Store.open(config)
    store.create_topic(TopicConfig("t", 1))
    for _ in range(8):
        store.append_columns("t", [b"x" * 1024] * 40)  # segments of 64 KiB: several
    assert "segment_age_errors" not in store.stats()
    store.close()
    store = Store.open(config)  # nothing of the segments read yet
    try:
        folder = tmp_path / "data" / fn.COMMITLOG_DIR / fn.State.UNSEALED
        first = min(os.listdir(folder))
        # a segment file lost under the store (a disk or an operator error): its age is not
        # known, so retention keeps it; that must show
        os.remove(folder / first)
        with caplog.at_level(logging.ERROR, logger="storage_node.store.lifecycle"):
            info = {f.name: f for f in store.list_files()}[first]
        assert info.begin_ms is None
        stats = store.stats()
        assert stats["segment_age_errors"] >= 1  # (each listing that tried counts)
        assert first in stats["last_segment_age_error"]
        assert "FileNotFoundError" in stats["last_segment_age_error"]
        assert f"the age of segment {first} is unknown" in caplog.text
        later = [f for f in store.list_files() if f.kind == "segment" and f.name != first]
        assert all(f.begin_ms is not None for f in later)  # the others' ages are known
    finally:
        store.close()


def test_a_segment_of_a_known_condition_has_no_age_and_no_error(tmp_path):
    """A damaged first record (reported by recovery and reads) is the expected 'no age'."""
    config = small_config(tmp_path / "data")
    store = Store.open(config)
    store.create_topic(TopicConfig("t", 1))
    for _ in range(8):
        store.append_columns("t", [b"x" * 1024] * 40)
    store.close()
    segments = sorted((tmp_path / "data" / fn.COMMITLOG_DIR / fn.State.UNSEALED).iterdir())
    with open(segments[0], "r+b") as fh:  # damage the first frame's records
        fh.seek(200)
        fh.write(b"\xff" * 64)
    store = Store.open(config)
    try:
        info = {f.name: f for f in store.list_files()}[segments[0].name]
        assert info.begin_ms is None
        assert "segment_age_errors" not in store.stats()
    finally:
        store.close()


def test_a_segment_older_than_the_retention_expires_while_newer_records_arrive(tmp_path):
    """Each segment's age is its first record's store time (the record after the frame
    header it starts with). Read at the segment start instead, it failed on every segment,
    the failure was taken for 'age unknown', every segment seemed as new as the newest
    record, and retention removed nothing from a store that kept taking writes."""
    store = Store.open(small_config(tmp_path / "data"))
    try:
        store.create_topic(TopicConfig("t", 1, retention_hours=1.0))
        for i in range(8):
            if i == 3:  # the later segments a clock tick younger than the first ones
                stamp = store.last_store_ms
                _wait_for(lambda s=stamp: time.time_ns() // 1_000_000 > s)
            store.append_columns("t", [b"x" * 1024] * 40)
        segments = [f for f in store.list_files() if f.kind == "segment"]
        assert all(f.begin_ms is not None for f in segments)
        cutoff = segments[-2].begin_ms  # a record stored then is exactly an hour old
        old = [f.name for f in segments if f.end_ms < cutoff]
        assert old and len(old) < len(segments) - 1
        removed = store.lifecycle.expire(cutoff + 3_600_000)
        assert removed == len(old)
        left = {f.name for f in store.list_files() if f.kind == "segment"}
        assert left == {f.name for f in segments} - set(old)
    finally:
        store.close()
