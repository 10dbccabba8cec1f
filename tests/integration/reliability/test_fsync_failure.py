"""An fsync that fails after the write succeeded (a device error, a delayed-allocation
ENOSPC): in sync mode the batches it should have made durable are answered with the error
and cut from the log, so neither the in-place resume nor a restart brings them back, and
every batch acknowledged before stays.

The failure is injected into the fsync of a commit-log segment only (every other fsync,
e.g. of checkpoints and index files, is the real one).
"""

from __future__ import annotations

import errno
import os

import pytest

from storage_node.errors import Unavailable
from storage_node.store import Store, TopicConfig

from .support import small_config


def is_log_segment(fd: int) -> bool:
    path = os.readlink(f"/proc/self/fd/{fd}")
    return os.path.basename(os.path.dirname(os.path.dirname(path))) == "commitlog"


class FailingLogFsync:
    """``os.fsync`` that fails with EIO on a commit-log segment once armed, once."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.armed = False
        self.failed = 0

    def __call__(self, fd: int) -> None:
        if self.armed and is_log_segment(fd):
            self.armed = False
            self.failed += 1
            raise OSError(errno.EIO, "injected fsync failure")
        self.real(fd)


@pytest.fixture
def failing_fsync(monkeypatch: pytest.MonkeyPatch) -> FailingLogFsync:
    fake = FailingLogFsync()
    monkeypatch.setattr(os, "fsync", fake)
    return fake


def values(tag: str, n: int = 20) -> list[bytes]:
    return [b"%s-%d" % (tag.encode(), i) for i in range(n)]


def test_a_failed_group_fsync_loses_nothing_acknowledged_and_keeps_nothing_refused(
    tmp_path, failing_fsync: FailingLogFsync
) -> None:
    config = small_config(tmp_path / "d", flush_mode="sync")
    store = Store.open(config)
    store.create_topic(TopicConfig("orders", 2))
    before = store.append_columns("orders", values("before"), [f"b{i}" for i in range(20)])

    failing_fsync.armed = True
    with pytest.raises(Unavailable, match="injected fsync failure"):
        store.append_columns("orders", values("refused"), [f"r{i}" for i in range(20)])
    assert failing_fsync.failed == 1

    after = store.append_columns("orders", values("after"), [f"a{i}" for i in range(20)])
    assert store.counters["resumed_after_write_error"] == 1

    def check(s: Store) -> None:
        stored = sorted(
            m.value
            for p in range(2)
            for m in s.read("orders", p, 0, 1000).messages  # every message of the partition
        )
        assert stored == sorted(values("before") + values("after"))
        for done, prefix in ((before, "b"), (after, "a")):
            for i, msg_id in enumerate(done.msg_ids):
                assert s.get_message(msg_id).key == f"{prefix}{i}"
        assert s.lookup_key("orders", "r3").messages == []

    check(store)
    store.close()
    with Store.open(config) as reopened:
        check(reopened)
