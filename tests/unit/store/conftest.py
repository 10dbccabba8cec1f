"""Small store configurations so rollover paths (segments, index files, queue files) run fast."""

from __future__ import annotations

import pytest

from storage_node.store import Store, StoreConfig, TopicConfig


def small_config(path: str, **overrides: object) -> StoreConfig:
    values: dict = dict(
        data_dir=str(path),
        segment_bytes=64 * 1024,
        index_slots=64,
        index_items=500,
        queue_file_entries=100,
        max_message_bytes=256 * 1024,
        lifecycle_interval_s=0,
        checkpoint_interval_s=3600,
        flush_max_age_ms=5,
    )
    values.update(overrides)
    return StoreConfig(**values)


@pytest.fixture
def config(tmp_path):
    return small_config(tmp_path / "data")


@pytest.fixture
def store(config):
    s = Store.open(config)
    s.create_topic(TopicConfig("orders", 3))
    yield s
    s.close()
