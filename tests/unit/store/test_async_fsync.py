"""``async`` mode bounds what a power loss can take: written bytes are fsynced once
``async_fsync_bytes`` of them wait, without anybody asking for durability."""

from __future__ import annotations

import time

from storage_node.store import Store, TopicConfig

from .conftest import small_config


def test_unsynced_bytes_are_fsynced_by_size(tmp_path) -> None:
    config = small_config(
        tmp_path / "d",
        flush_mode="async",
        flush_max_bytes=16 * 1024,
        async_fsync_bytes=64 * 1024,
        async_fsync_interval_ms=3_600_000,  # never by time in this test
        segment_bytes=8 << 20,
    )
    with Store.open(config) as store:
        store.create_topic(TopicConfig("orders", 1))
        for _ in range(40):  # about 400 KiB
            store.append_columns("orders", [b"x" * 1000] * 10)
        deadline = time.monotonic() + 10
        while store.log.durable_end < 300 * 1024 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.log.durable_end >= 300 * 1024, store.log.stats
        assert store.log.durable_end <= store.log.written_end <= store.log.end
