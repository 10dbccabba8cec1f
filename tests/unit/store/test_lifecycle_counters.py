"""The lifecycle pass counts its compaction, upload and retention runs and failures (the
node exports them as msgstore_lifecycle_runs_total / _failures_total): a compaction that
really fails (its target folder is a file) is counted and still raised."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from storage_node.store import MessageIn, Store, TopicConfig
from tests.unit.store.conftest import small_config


def test_compaction_failure_is_counted_and_raised(tmp_path) -> None:
    s = Store.open(small_config(tmp_path / "d", segment_bytes=16 * 1024))
    try:
        s.create_topic(TopicConfig("t", 2))
        for b in range(20):
            s.append("t", [MessageIn(f"{b}-{i}".encode() * 20) for i in range(20)])
        s.seal_active()
        later = int(time.time() * 1000) + 10**9
        compacted = s.log.dirs["compacted"]
        shutil.rmtree(compacted)
        with open(compacted, "wb"):  # compaction cannot write its files any more
            pass
        with pytest.raises(OSError):
            s.run_lifecycle_once(later)
        assert s.counters["compaction_runs"] == 1
        assert s.counters["compaction_failures"] == 1
        assert "retention_runs" not in s.counters  # the pass stopped at the failure
        os.remove(compacted)
        os.makedirs(compacted)
        report = s.run_lifecycle_once(later)
        assert report["segments"] > 0
        assert s.counters["compaction_runs"] == 2
        assert s.counters["compaction_failures"] == 1
        assert s.counters["upload_runs"] == 1
        assert s.counters["retention_runs"] == 1
        assert s.counters.get("retention_failures", 0) == 0
    finally:
        s.close()
