"""Access metrics, read from the authorizer at scrape time: requests refused by operation
and resource type, user and ACL changes applied by kind, access files refused, and the
access document's generation in force (every node of a cluster should show the same).

Labels are bounded: 6 operations x 3 resource types (topic, group, cluster), 5 change kinds.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from storage_node.access.access_file import CHANGE_KINDS
from storage_node.access.authorizer import CLUSTER
from storage_node.access.document import Operation, ResourceType
from storage_node.server.runtime import NodeRuntime

RESOURCES = (ResourceType.TOPIC.value, ResourceType.GROUP.value, CLUSTER)


class AccessCollector(Collector):
    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        authorizer = self.runtime.authorizer
        denied = CounterMetricFamily(
            "msgstore_access_denied",
            "requests refused by the ACL rules, by operation and resource type",
            labels=["operation", "resource"],
        )
        counts = authorizer.denial_counts()
        for operation in Operation:
            for resource in RESOURCES:
                denied.add_metric(
                    [operation.value, resource], counts.get((operation.value, resource), 0)
                )
        yield denied
        authorizer.document()  # take a changed file first
        access = authorizer.access
        changes = CounterMetricFamily(
            "msgstore_access_changes",
            "user and ACL rule changes this node applied, by kind",
            labels=["kind"],
        )
        applied = dict(access.changes) if access is not None else {}
        for kind in CHANGE_KINDS:
            changes.add_metric([kind], applied.get(kind, 0))
        yield changes
        rejected = CounterMetricFamily(
            "msgstore_access_file_rejected",
            "access documents refused (malformed, or older than the one in force)",
        )
        rejected.add_metric([], access.rejected if access is not None else 0)
        yield rejected
        generation = GaugeMetricFamily(
            "msgstore_access_generation",
            "generation of the access document in force (0: none, the two-token mode)",
        )
        generation.add_metric([], access.generation if access is not None else 0)
        yield generation
