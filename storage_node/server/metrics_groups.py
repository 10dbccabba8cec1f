"""Consumer lag and partition offsets, computed at scrape time from the stores.

Per served partition: its first and next offset. Per group and partition with a committed
offset: the committed offset, the lag in messages (next offset minus committed) and in
seconds (how long ago the oldest unread message was stored: Burrow's and
kafka-lag-exporter's time lag). The store time of the message at a committed offset never
changes, so it is read once and remembered while that offset stays committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from storage_node.server.metrics_served import served_partitions
from storage_node.server.runtime import NodeRuntime
from storage_node.store import Store

log = logging.getLogger(__name__)
PARTITION = ["topic", "partition"]
GROUP = ["group", "topic", "partition"]


class GroupCollector(Collector):
    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime
        self._store_ms: dict[tuple[int, str, int, int], int] = {}

    def collect(self) -> Iterator[Metric]:
        first = GaugeMetricFamily(
            "msgstore_partition_first_offset",
            "oldest offset still held of a partition this node serves (messages)",
            labels=PARTITION,
        )
        nxt = GaugeMetricFamily(
            "msgstore_partition_next_offset",
            "offset the next message of a partition this node serves gets (messages)",
            labels=PARTITION,
        )
        committed = GaugeMetricFamily(
            "msgstore_group_committed_offset",
            "offset a consumer group committed for a partition (messages)",
            labels=GROUP,
        )
        lag = GaugeMetricFamily(
            "msgstore_group_lag_messages",
            "messages of a partition a consumer group has not committed yet (messages)",
            labels=GROUP,
        )
        lag_s = GaugeMetricFamily(
            "msgstore_group_lag_seconds",
            "age of the oldest message a consumer group has not committed (seconds)",
            labels=GROUP,
        )
        now_ms = int(time.time() * 1000)
        remembered: dict[tuple[int, str, int, int], int] = {}
        try:
            self._collect(first, nxt, committed, lag, lag_s, now_ms, remembered)
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail with a store
            log.warning("consumer lag metrics failed: %s", exc)
        self._store_ms = remembered
        yield from (first, nxt, committed, lag, lag_s)

    def _collect(
        self,
        first: GaugeMetricFamily,
        nxt: GaugeMetricFamily,
        committed: GaugeMetricFamily,
        lag: GaugeMetricFamily,
        lag_s: GaugeMetricFamily,
        now_ms: int,
        remembered: dict[tuple[int, str, int, int], int],
    ) -> None:
        by_store: dict[int, tuple[Store, dict[str, dict[int, tuple[int, int]]]]] = {}
        for served, topic, partitions in served_partitions(self.runtime.partitions):
            if not partitions:
                continue
            offsets = served.store.partition_offsets(topic)
            held = by_store.setdefault(id(served.store), (served.store, {}))[1]
            for p in partitions:
                lo, hi = offsets[p]
                held.setdefault(topic, {})[p] = (lo, hi)
                first.add_metric([topic, str(p)], lo)
                nxt.add_metric([topic, str(p)], hi)
        for store, held in by_store.values():
            for group in store.consumer_groups():
                for topic, parts in store.committed_offsets(group).items():
                    for p, offset in parts.items():
                        if p not in held.get(topic, {}):
                            continue
                        lo, hi = held[topic][p]
                        labels = [group, topic, str(p)]
                        committed.add_metric(labels, offset)
                        behind = max(0, hi - offset)
                        lag.add_metric(labels, behind)
                        seconds = 0.0
                        if behind:
                            oldest = max(offset, lo)
                            stored = self._stored_ms(store, topic, p, oldest, remembered)
                            if stored is not None:
                                seconds = max(0, now_ms - stored) / 1000
                        lag_s.add_metric(labels, seconds)

    def _stored_ms(
        self,
        store: Store,
        topic: str,
        partition: int,
        offset: int,
        remembered: dict[tuple[int, str, int, int], int],
    ) -> int | None:
        key = (id(store), topic, partition, offset)
        stored = self._store_ms.get(key)
        if stored is None:
            try:
                (message,) = store.read(topic, partition, offset, max_messages=1).messages
                stored = int(message.store_timestamp)
            except Exception as exc:  # noqa: BLE001 - expired or unreadable: no time lag
                log.debug("no store time for %s/%d@%d: %s", topic, partition, offset, exc)
                return None
        remembered[key] = stored
        return stored
