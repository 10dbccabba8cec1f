"""Node-level metrics read at scrape time: disk, files per lifecycle folder, the file
lifecycle's runs and failures, the last recovery, certificate expiry.

Each store (the node's own, or one per replicated log it holds) is labelled with ``log``,
which is the node id when logs are not replicated: a node has at most a handful of stores.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

from cryptography import x509
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from storage_node.server.metrics_served import stores_of
from storage_node.server.runtime import NodeRuntime

log = logging.getLogger(__name__)
STATES = ("unsealed", "sealed", "compacted", "uploaded")
TASKS = ("compaction", "upload", "retention")
# (task) -> (store counter of its runs, of its failures)
TASK_COUNTERS = {
    "compaction": ("compaction_runs", "compaction_failures"),
    "upload": ("upload_runs", "upload_failures"),
    "retention": ("retention_runs", "retention_failures"),
}
RECOVERY = {
    "truncated_bytes": ("msgstore_recovery_truncated_bytes", "bytes of torn log tail cut"),
    "corrupt_records": ("msgstore_recovery_corrupt_records", "corrupt records skipped"),
    "corrupt_files": ("msgstore_recovery_corrupt_files", "corrupt files set aside"),
    "replayed_records": ("msgstore_recovery_replayed_records", "records replayed into indexes"),
}


class NodeCollector(Collector):
    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime
        self._certs: dict[str, tuple[float, float]] = {}  # path -> (mtime, not_after)

    def collect(self) -> Iterator[Metric]:
        settings = self.runtime.settings
        info = GaugeMetricFamily(
            "msgstore_node_info", "1, labelled with the node id", labels=["node"]
        )
        info.add_metric([settings.node_id], 1.0)
        yield info
        yield from self._disk(settings.data_dir)
        yield from self._stores()
        yield from self._certificates(settings)

    def _disk(self, data_dir: str) -> Iterator[Metric]:
        free = GaugeMetricFamily("msgstore_disk_free_bytes", "free bytes on the data disk")
        size = GaugeMetricFamily("msgstore_disk_size_bytes", "size of the data disk (bytes)")
        if data_dir and os.path.isdir(data_dir):
            usage = shutil.disk_usage(data_dir)
            free.add_metric([], usage.free)
            size.add_metric([], usage.total)
        yield free
        yield size

    def _stores(self) -> Iterator[Metric]:
        labels = ["log", "state"]
        files = GaugeMetricFamily(
            "msgstore_lifecycle_files", "files (segments and key indexes) per lifecycle folder",
            labels=labels,
        )  # fmt: skip
        stored = GaugeMetricFamily(
            "msgstore_lifecycle_bytes", "stored bytes per lifecycle folder (uploaded: in the "
            "object store)", labels=labels,
        )  # fmt: skip
        runs = CounterMetricFamily(
            "msgstore_lifecycle_runs", "lifecycle task runs", labels=["log", "task"]
        )
        failures = CounterMetricFamily(
            "msgstore_lifecycle_failures", "lifecycle task runs that failed", labels=["log", "task"]
        )
        maint = CounterMetricFamily(
            "msgstore_maintenance_errors", "failed checkpoints or lifecycle passes", labels=["log"]
        )
        seconds = GaugeMetricFamily(
            "msgstore_recovery_seconds", "how long the last opening of a store took to recover",
            labels=["log"],
        )  # fmt: skip
        clean = GaugeMetricFamily(
            "msgstore_recovery_clean", "1 when the store was last closed cleanly", labels=["log"]
        )
        found = {
            key: GaugeMetricFamily(name, f"last recovery: {text}", labels=["log"])
            for key, (name, text) in RECOVERY.items()
        }
        for served in stores_of(self.runtime.partitions):
            store, name = served.store, served.log
            try:
                listed = store.list_files()
            except Exception as exc:  # noqa: BLE001 - a scrape must not fail with a store
                log.warning("list_files of log %s failed: %s", name, exc)
                listed = []
            sums = {s: [0.0, 0.0] for s in STATES}
            for f in listed:
                entry = sums.setdefault(f.state, [0.0, 0.0])
                entry[0] += 1
                entry[1] += f.stored_size
            for state, (n, size) in sums.items():
                files.add_metric([name, state], n)
                stored.add_metric([name, state], size)
            counters = store.counters
            for task, (run_key, fail_key) in TASK_COUNTERS.items():
                runs.add_metric([name, task], counters.get(run_key, 0))
                failures.add_metric([name, task], counters.get(fail_key, 0))
            maint.add_metric([name], counters.get("maintenance_errors", 0))
            report = store.recovery_report
            seconds.add_metric([name], store.recovery_seconds)
            clean.add_metric([name], 1.0 if report.get("clean") else 0.0)
            for key, family in found.items():
                value = report.get(key, 0)
                family.add_metric([name], len(value) if isinstance(value, list) else value)
        yield from (files, stored, runs, failures, maint, seconds, clean, *found.values())

    def _certificates(self, settings: Any) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "msgstore_tls_certificate_expiry_seconds",
            "seconds until a certificate this node uses expires (negative: expired)",
            labels=["certificate"],
        )
        now = time.time()
        for which, path in (("server", settings.tls_cert), ("ca", settings.tls_ca)):
            if not path:
                continue
            not_after = self._not_after(path)
            if not_after is not None:
                family.add_metric([which], not_after - now)
        yield family

    def _not_after(self, path: str) -> float | None:
        """The first certificate's expiry in a PEM file, read again when the file changes."""
        try:
            mtime = os.stat(path).st_mtime
            known = self._certs.get(path)
            if known is not None and known[0] == mtime:
                return known[1]
            with open(path, "rb") as fh:
                cert = x509.load_pem_x509_certificate(fh.read())
        except (OSError, ValueError) as exc:
            log.warning("cannot read certificate %s: %s", path, exc)
            return None
        not_after = cert.not_valid_after_utc.timestamp()
        self._certs[path] = (mtime, not_after)
        return not_after
