"""Replication metrics of the logs one node holds, read at scrape time from ``LogHost``.

Per log: this node's role (a state set: leader, follower, recovering), the epoch it acts
under, leader changes it saw, its copy's end; on the leader, the replicas in sync, each
follower's lag in bytes and seconds, and whether the log is under-replicated; on any node,
whether the log is offline here (no leader named yet, or fenced while leading). Node-wide
counts of under-replicated and offline logs follow Kafka's ReplicaManager gauges.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from storage_node.server.runtime import NodeRuntime

ROLES = ("leader", "follower", "recovering")


class ReplicationCollector(Collector):
    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily
        role = g("msgstore_log_role", "1 for this node's role in a log", labels=["log", "role"])
        epoch = g("msgstore_log_epoch", "leader epoch this node acts under", labels=["log"])
        changes = CounterMetricFamily(
            "msgstore_log_leader_changes",
            "leader changes of a log seen by this node",
            labels=["log"],
        )
        end = g(
            "msgstore_log_end_bytes", "end position of this node's copy (bytes)", labels=["log"]
        )
        replicas = g(
            "msgstore_log_replicas", "copies a log is kept on (replication factor)", labels=["log"]
        )
        in_sync = g(
            "msgstore_log_in_sync_replicas", "copies in sync, the leader's included", labels=["log"]
        )
        min_isr = g(
            "msgstore_log_min_in_sync_replicas", "copies a sync write needs", labels=["log"]
        )
        lag_b = g(
            "msgstore_log_follower_lag_bytes",
            "bytes a follower's durable copy is behind the leader (reported by the leader)",
            labels=["log", "follower"],
        )
        lag_s = g(
            "msgstore_log_follower_lag_seconds",
            "seconds since a follower last reached the leader's durable end (0: caught up)",
            labels=["log", "follower"],
        )
        copy_lag = g(
            "msgstore_log_copy_lag_bytes",
            "bytes this follower's copy is behind the end its leader last reported",
            labels=["log"],
        )
        under = g("msgstore_log_under_replicated", "1 when a led log has fewer copies in sync "
                  "than its replication factor", labels=["log"])  # fmt: skip
        offline = g("msgstore_log_offline", "1 when this node holds a log nobody may write "
                    "through it: no leader named yet, or fenced while leading", labels=["log"])  # fmt: skip
        truncs = CounterMetricFamily(
            "msgstore_log_truncations",
            "times this node cut its copy back (KIP-101)",
            labels=["log"],
        )
        trunc_b = CounterMetricFamily(
            "msgstore_log_truncated_bytes",
            "bytes this node cut from its copy (KIP-101)",
            labels=["log"],
        )
        under_n = g("msgstore_under_replicated_logs", "logs led here that are under-replicated")
        offline_n = g("msgstore_offline_logs", "logs held here that are offline here")
        host = self.runtime.replicas
        n_under = n_offline = 0
        if host is not None:
            table = host.table
            factor = table.replication_factor if table is not None else 1
            min_in_sync = table.min_in_sync if table is not None else 1
            now = time.monotonic()
            for log_id, hosted in sorted(list(host.logs.items())):
                for r in ROLES:
                    role.add_metric([log_id, r], 1.0 if hosted.role == r else 0.0)
                epoch.add_metric([log_id], hosted.epoch)
                changes.add_metric([log_id], hosted.leader_changes)
                copy = hosted.store.log_ends()
                end.add_metric([log_id], copy.end)
                replicas.add_metric([log_id], factor)
                min_isr.add_metric([log_id], min_in_sync)
                truncs.add_metric([log_id], hosted.truncations)
                trunc_b.add_metric([log_id], hosted.truncated_bytes)
                is_offline = hosted.role == "recovering" or (
                    hosted.role == "leader" and hosted.stale
                )
                offline.add_metric([log_id], 1.0 if is_offline else 0.0)
                n_offline += is_offline
                tracker = hosted.tracker
                if hosted.role == "leader" and tracker is not None:
                    durable = copy.durable_end
                    synced = tracker.in_sync(durable)
                    count = 1 + len(synced)
                    in_sync.add_metric([log_id], count)
                    is_under = count < factor
                    under.add_metric([log_id], 1.0 if is_under else 0.0)
                    n_under += is_under
                    for name, state in sorted(list(tracker.followers.items())):
                        lag_b.add_metric([log_id, name], max(0, durable - state.acked))
                        behind = 0.0 if state.acked >= durable else now - state.caught_up
                        lag_s.add_metric([log_id, name], max(0.0, behind))
                follower = hosted.follower
                if hosted.role == "follower" and follower is not None:
                    copy_lag.add_metric([log_id], max(0, follower.leader_end - copy.end))
        under_n.add_metric([], n_under)
        offline_n.add_metric([], n_offline)
        yield from (role, epoch, changes, end, replicas, in_sync, min_isr, lag_b, lag_s)
        yield from (copy_lag, under, offline, truncs, trunc_b, under_n, offline_n)
