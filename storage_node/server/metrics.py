"""Prometheus metrics of one node: request counts and latencies, appends, store state.

The registry holds the event metrics counted as requests pass (requests, produce and fetch
latency by protocol, appends) and the collectors that read the node's state at scrape time
(store statistics here; node, consumer-lag and replication metrics in their own modules).
Every label has a bounded set of values: docs/OPERATIONS.md gives the worst case.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from storage_node.server.metrics_access import AccessCollector
from storage_node.server.metrics_groups import GroupCollector
from storage_node.server.metrics_node import NodeCollector
from storage_node.server.metrics_replication import ReplicationCollector
from storage_node.server.runtime import NodeRuntime

log = logging.getLogger(__name__)
# No ``*_created`` series beside every counter and histogram: they double the page and no
# rule or dashboard reads them.
disable_created_metrics()

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
PROTOCOLS = ("http", "kafka")
OPERATIONS = ("produce", "fetch")


class StoreCollector(Collector):
    """Reads the store's own counters and file states at scrape time.

    What only grows (the store's ``counters`` and the commit log's ``stats``: appends, reads,
    fsyncs, ...) is exported as a Prometheus counter (``..._total``), so ``rate()`` works
    across restarts; levels (file counts, bytes held, positions) as gauges."""

    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        up = GaugeMetricFamily("msgstore_store_ready", "1 once the store finished recovery")
        store = self.runtime.store
        up.add_metric([], 1.0 if store is not None and store.ready else 0.0)
        yield up
        draining = GaugeMetricFamily("msgstore_draining", "1 while the node refuses writes")
        draining.add_metric([], 1.0 if self.runtime.draining else 0.0)
        yield draining
        if store is None:
            return
        try:
            stats = store.stats()
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail with the store
            log.warning("store stats failed: %s", exc)
            stats = {}
        growing = store.growing_stats()
        for key, value in sorted(_flatten(stats).items()):
            if key == "ready":
                continue  # msgstore_store_ready above: one family per name
            name = "msgstore_store_" + _metric_name(key)
            metric: GaugeMetricFamily | CounterMetricFamily
            if key in growing:
                metric = CounterMetricFamily(name, f"store counter {key}")
            else:
                metric = GaugeMetricFamily(name, f"store statistic {key}")
            metric.add_metric([], float(value))
            yield metric
        try:
            files = store.list_files()
        except Exception as exc:  # noqa: BLE001
            log.warning("list_files failed: %s", exc)
            return
        counts: dict[tuple[str, str], list[float]] = {}
        for info in files:
            entry = counts.setdefault((info.kind, info.state), [0.0, 0.0])
            entry[0] += 1
            entry[1] += info.stored_size
        fam_n = GaugeMetricFamily(
            "msgstore_files", "files per kind and state", labels=["kind", "state"]
        )
        fam_b = GaugeMetricFamily(
            "msgstore_file_bytes", "stored bytes per kind and state", labels=["kind", "state"]
        )
        for (kind, state), (n, size) in sorted(counts.items()):
            fam_n.add_metric([kind, state], n)
            fam_b.add_metric([kind, state], size)
        yield fam_n
        yield fam_b


def _metric_name(key: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in key).strip("_").lower()


def _flatten(stats: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Keep numeric leaves of a nested stats dict, joining keys with '_'."""
    out: dict[str, float] = {}
    for key, value in stats.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "_"))
        elif isinstance(value, bool):
            out[name] = float(value)
        elif isinstance(value, int | float):
            out[name] = float(value)
    return out


class NodeMetrics:
    """One registry per app, so several nodes in one process (tests) do not collide."""

    def __init__(self, runtime: NodeRuntime) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "msgstore_http_requests",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "msgstore_http_request_seconds",
            "HTTP request latency by route",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.appended_messages = Counter(
            "msgstore_appended_messages", "messages acknowledged", registry=self.registry
        )
        self.appended_bytes = Counter(
            "msgstore_appended_bytes", "value bytes acknowledged", registry=self.registry
        )
        self.append_batches = Counter(
            "msgstore_append_batches",
            "append requests by body format",
            ["format"],
            registry=self.registry,
        )
        self.append_seconds = Histogram(
            "msgstore_append_durable_seconds",
            "time from submit to durable acknowledgement",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.compaction_seconds = Histogram(
            "msgstore_compaction_seconds",
            "duration of compactions started through the admin API",
            buckets=(0.01, 0.1, 0.5, 1, 5, 15, 60, 300),
            registry=self.registry,
        )
        self.routing_reloads = Counter(
            "msgstore_routing_reloads", "routing table reloads", registry=self.registry
        )
        self.operation_seconds = {
            op: Histogram(
                f"msgstore_{op}_seconds",
                f"{op} request latency by protocol, from request to answer (seconds)",
                ["protocol"],
                buckets=LATENCY_BUCKETS,
                registry=self.registry,
            )
            for op in OPERATIONS
        }
        for op in OPERATIONS:  # every protocol's series exists from the start
            for protocol in PROTOCOLS:
                self.operation_seconds[op].labels(protocol)
        self.registry.register(StoreCollector(runtime))
        self.registry.register(NodeCollector(runtime))
        self.registry.register(GroupCollector(runtime))
        self.registry.register(ReplicationCollector(runtime))
        self.registry.register(AccessCollector(runtime))

    def observe(self, operation: str, protocol: str, seconds: float) -> None:
        """One produce or fetch request of a protocol (``http``, ``kafka``) took ``seconds``:
        the one call a listener makes per request (bounded labels: both are checked)."""
        if operation not in OPERATIONS or protocol not in PROTOCOLS:
            raise ValueError(f"unknown operation or protocol: {operation!r}, {protocol!r}")
        self.operation_seconds[operation].labels(protocol).observe(seconds)
