"""The one call a protocol listener makes per request (the Kafka listener's hook): it lands in
the same produce/fetch histograms as HTTP, by protocol; an unknown protocol or operation is
refused (bounded labels) and records nothing."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from storage_node.server.metrics import NodeMetrics
from storage_node.server.runtime import NodeRuntime
from storage_node.server.settings import NodeSettings


def test_observe_by_protocol(tmp_path) -> None:
    runtime = NodeRuntime(NodeSettings(data_dir=str(tmp_path)))
    try:
        metrics = NodeMetrics(runtime)
        metrics.observe("produce", "kafka", 0.004)
        metrics.observe("fetch", "kafka", 0.2)
        metrics.observe("fetch", "http", 0.01)
        with pytest.raises(ValueError, match="amqp"):
            metrics.observe("produce", "amqp", 0.1)
        with pytest.raises(ValueError, match="delete"):
            metrics.observe("delete", "kafka", 0.1)
        page = generate_latest(metrics.registry).decode()
        assert 'msgstore_produce_seconds_count{protocol="kafka"} 1.0' in page
        assert 'msgstore_produce_seconds_count{protocol="http"} 0.0' in page
        assert 'msgstore_fetch_seconds_count{protocol="kafka"} 1.0' in page
        assert 'msgstore_fetch_seconds_count{protocol="http"} 1.0' in page
        assert "amqp" not in page and "msgstore_delete_seconds" not in page
        assert "msgstore_store_ready 0.0" in page  # no store yet: the page still renders
    finally:
        runtime.executor.shutdown()
