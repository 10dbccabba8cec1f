"""One replicated log on this node: its store, its epoch history and its role.

The copy loop (``follower.Follower``) and the leader's shipping (``leader``) work on it;
``replicas.LogHost`` holds one per log and changes its role as the routing table says.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, Protocol

from storage_node.errors import CorruptData
from storage_node.replication.epochs import LeaderEpochs
from storage_node.replication.insync import InSyncTracker
from storage_node.replication.log_identity import read_log_ip, write_log_ip
from storage_node.store import Store, TopicConfig


def ensure_topics(store: Store, configs: Iterable[TopicConfig]) -> None:
    """Create the topics a store lacks (one it has keeps its config)."""
    known = {t.name for t in store.list_topics()}
    for cfg in configs:
        if cfg.name not in known:
            store.create_topic(cfg)


class CopyLoop(Protocol):
    """What a hosted log sees of its copy loop (a follower's)."""

    leader_end: int
    last_error: str | None

    def close(self) -> None: ...


class HostedLog:
    """One log on this node: its store and what this node does with it."""

    def __init__(self, log_id: str, directory: str, store: Store) -> None:
        self.id = log_id
        self.dir = directory
        self.store = store
        self.epochs = LeaderEpochs(directory)
        self.role = "follower"
        self.epoch = 0  # the epoch of the routing table this node acts under
        self.leader = ""
        self.fenced_epoch = 0  # a controller's fence: follow nobody older than this
        self.stale = False  # (leader) a follower knows a newer epoch: write nothing
        self.shipped_end = 0  # (leader) the end of the bytes shipped under this epoch
        self.tracker: InSyncTracker | None = None
        self.follower: CopyLoop | None = None  # (follower) replication.follower.Follower
        self.lock = threading.Lock()
        # for metrics: leader changes seen here, and what copies were cut back (KIP-101)
        self.leader_changes = 0
        self.truncations = 0
        self.truncated_bytes = 0

    def ensure_topics(self, topics: dict[str, dict[str, Any]]) -> None:
        """Create the leader's topics this copy lacks (sent with a shipment)."""
        ensure_topics(self.store, [TopicConfig(name=n, **cfg) for n, cfg in topics.items()])

    def remember_node_ip(self, ip: str) -> None:
        """Keep the IP the leader's message IDs carry (a copy's unreadable file is replaced
        by the leader's word)."""
        try:
            known = self.node_ip()
        except CorruptData:
            known = None
        if known != ip:
            write_log_ip(self.dir, ip)

    def node_ip(self) -> str | None:
        """The IP of this log's message IDs; None before its first leader picked one;
        CorruptData when log.json cannot be read."""
        return read_log_ip(self.dir)

    def status(self) -> dict[str, Any]:
        ends = self.store.log_ends()
        doc: dict[str, Any] = {
            "role": self.role,
            "leader": self.leader,
            "epoch": self.epoch,
            "epochs": self.epochs.entries,
            "log_start": ends.start,
            "log_end": ends.end,
            "durable_end": ends.durable_end,
            "fenced_epoch": self.fenced_epoch,  # above ``epoch``: a failover is under way
        }
        if self.tracker is not None:
            followers = self.tracker.status(ends.durable_end)
            doc["followers"] = followers
            doc["in_sync"] = 1 + sum(1 for f in followers.values() if f["in_sync"])
        if self.follower is not None:
            doc["leader_end"] = self.follower.leader_end
            doc["lag_bytes"] = max(0, self.follower.leader_end - ends.end)
            doc["last_error"] = self.follower.last_error
        return doc
