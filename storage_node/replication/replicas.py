"""The replicated logs one node hosts: a full store per log, led or followed.

Each log lives in ``<data dir>/logs/<log id>/`` as an ordinary store directory (commit log
in unsealed/compacted/uploaded, indexes, checkpoint) plus its leader-epoch history. The
routing table says, per log, which node leads it under which epoch; ``apply`` brings this
node in line: it promotes a followed log it now leads (its indexes are current: every
copied batch was indexed as it arrived), demotes a log another node now leads, starts
and stops copy loops.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import os
import shutil
import threading
import zlib
from typing import Any
from urllib.parse import urlsplit

from storage_node.backend.files import atomic_write
from storage_node.errors import Fenced, NotOwner, Unavailable
from storage_node.formats.segment_name import parse_segment_name, segment_name
from storage_node.replication.epochs import LeaderEpochs, check_epoch
from storage_node.replication.follower import Follower
from storage_node.replication.insync import InSyncTracker
from storage_node.store import Store, TopicConfig
from storage_node.wire.routing_table import RoutingTable, TopicRoute

log = logging.getLogger(__name__)
LOG_INFO = "log.json"  # the IP the log's message IDs carry (kept across failovers)


STANDIN_NET = int(ipaddress.IPv4Address("240.0.0.0"))  # 240.0.0.0/4: reserved, no host has one


def standin_ip(log_id: str, log_ids: list[str]) -> str:
    """The IP a log's message IDs carry when no node address gives it one: an address in
    240.0.0.0/4, which no host is given, so it never equals a log's IP taken from its first
    leader's address. Two logs of a routing table never get the same one: the logs, in
    sorted order, each take the first free address from a hash of their name on."""
    taken: set[int] = set()
    mine = None
    for name in sorted({*log_ids, log_id}):
        slot = zlib.crc32(name.encode()) & 0x0FFFFFFF
        while slot in taken:
            slot = (slot + 1) & 0x0FFFFFFF
        taken.add(slot)
        if name == log_id:
            mine = slot
    assert mine is not None
    return str(ipaddress.IPv4Address(STANDIN_NET | mine))


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
        self.follower: Follower | None = None
        self.lock = threading.Lock()
        # for metrics: leader changes seen here, and what copies were cut back (KIP-101)
        self.leader_changes = 0
        self.truncations = 0
        self.truncated_bytes = 0

    def ensure_topics(self, topics: dict[str, dict[str, Any]]) -> None:
        for name, cfg in topics.items():
            if name not in self.store.topics.topics:
                self.store.create_topic(TopicConfig(name=name, **cfg))

    def remember_node_ip(self, ip: str) -> None:
        path = os.path.join(self.dir, LOG_INFO)
        if self.node_ip() != ip:
            atomic_write(path, json.dumps({"node_ip": ip}).encode())

    def node_ip(self) -> str | None:
        try:
            with open(os.path.join(self.dir, LOG_INFO), "rb") as fh:
                return str(json.loads(fh.read())["node_ip"])
        except (OSError, ValueError, KeyError):
            return None

    def status(self) -> dict[str, Any]:
        log_ = self.store.log
        doc: dict[str, Any] = {
            "role": self.role,
            "leader": self.leader,
            "epoch": self.epoch,
            "epochs": self.epochs.entries,
            "log_start": log_.start_pos,
            "log_end": log_.end,
            "durable_end": log_.durable_end,
            "fenced_epoch": self.fenced_epoch,  # above ``epoch``: a failover is under way
        }
        if self.tracker is not None:
            followers = self.tracker.status(log_.durable_end)
            doc["followers"] = followers
            doc["in_sync"] = 1 + sum(1 for f in followers.values() if f["in_sync"])
        if self.follower is not None:
            doc["leader_end"] = self.follower.leader_end
            doc["lag_bytes"] = max(0, self.follower.leader_end - log_.end)
            doc["last_error"] = self.follower.last_error
        return doc


def _at(hosted: HostedLog) -> dict[str, Any]:
    """The ``log`` and ``epoch`` fields of a log line about a hosted log."""
    return {"log": hosted.id, "epoch": hosted.epoch}


def routed_topic(route: TopicRoute) -> TopicConfig:
    """A topic of the routing table as a store creates it."""
    return TopicConfig(name=route.name, **route.config_dict())


def topic_configs(store: Store) -> dict[str, dict[str, Any]]:
    return {
        t.name: {
            "partitions": t.partitions,
            "compression": t.compression,
            "retention_hours": t.retention_hours,
        }
        for t in store.list_topics()
    }


class LogHost:
    """The logs of one node, kept in line with the routing table."""

    def __init__(
        self,
        node_id: str,
        data_dir: str,
        config: Any,
        headers: dict[str, str],
        verify: str | bool,
        ack_timeout_s: float = 5.0,
    ) -> None:
        self.node_id = node_id
        self.root = os.path.join(data_dir, "logs")
        self.config = config
        self.headers = headers
        self.verify = verify
        self.ack_timeout_s = ack_timeout_s
        self.logs: dict[str, HostedLog] = {}
        self.table: RoutingTable | None = None
        self._apply_lock = threading.Lock()

    # -- opening and closing ------------------------------------------------------------
    def _open(self, log_id: str) -> HostedLog:
        directory = os.path.join(self.root, log_id)
        os.makedirs(directory, exist_ok=True)
        config = dataclasses.replace(self.config, data_dir=directory)
        return HostedLog(log_id, directory, Store.open(config))

    def home_store(self) -> Store | None:
        hosted = self.logs.get(self.node_id) or next(iter(self.logs.values()), None)
        return hosted.store if hosted is not None else None

    def all_stores(self) -> list[Store]:
        return [h.store for h in self.logs.values()]

    def close(self) -> None:
        for hosted in list(self.logs.values()):
            if hosted.follower is not None:
                hosted.follower.close()
            hosted.store.close()
        self.logs.clear()

    # -- the routing table --------------------------------------------------------------
    def apply(self, table: RoutingTable) -> None:
        """(Blocking.) Open, promote, demote and follow as the table says."""
        with self._apply_lock:
            self.table = table
            wanted = {lg.id: lg for lg in table.logs_of(self.node_id)}
            for log_id, route in wanted.items():
                hosted = self.logs.get(log_id)
                if hosted is None:
                    hosted = self.logs[log_id] = self._open(log_id)
                    if route.leader == self.node_id:
                        # Never lead a log on the strength of an old table: this copy may
                        # be empty (a replaced volume) or behind. The controller sees the
                        # log recovering and names its leader under a new epoch, this
                        # node again if its copy is the most caught up.
                        hosted.role, hosted.epoch, hosted.leader = "recovering", route.epoch, ""
                        log.info("waiting for the controller to name a leader", extra=_at(hosted))
                        continue
                if route.epoch < hosted.epoch:
                    continue  # an older table than the one acted on
                if hosted.role == "recovering" and route.epoch == hosted.epoch:
                    continue
                changed = (route.epoch, route.leader) != (hosted.epoch, hosted.leader)
                if not changed and (hosted.role == "leader") == (route.leader == self.node_id):
                    continue
                followers = [r for r in route.replicas if r != route.leader]
                if changed:
                    hosted.leader_changes += 1
                if route.leader == self.node_id:
                    self._lead(hosted, route.epoch, followers, table.min_in_sync)
                else:
                    self._follow(hosted, route.leader, route.epoch)
            for log_id in [i for i in self.logs if i not in wanted]:
                hosted = self.logs.pop(log_id)
                if hosted.follower is not None:
                    hosted.follower.close()
                hosted.store.close()

    def _lead(self, hosted: HostedLog, epoch: int, followers: list[str], min_in_sync: int) -> None:
        if hosted.follower is not None:
            hosted.follower.close()
            hosted.follower = None
        hosted.store.resume_after_write_error()
        store = hosted.store
        store.log.flush()
        if not hosted.epochs.entries or hosted.epochs.latest < epoch:
            hosted.epochs.begin(epoch, store.log.end)
        ip = hosted.node_ip()
        if ip is None:  # the log's first leader, or a copy that never heard from one
            ip = self._home_ip(hosted.id) or standin_ip(hosted.id, self._log_ids())
            hosted.remember_node_ip(ip)
        store.set_node_ip(ip)  # message IDs keep the log's IP across failovers
        hosted.tracker = InSyncTracker(followers, min_in_sync)
        hosted.stale = False
        hosted.shipped_end = 0
        hosted.leader, hosted.epoch, hosted.role = self.node_id, epoch, "leader"
        log.info("leading from position %d", store.log.end, extra=_at(hosted))

    def _follow(self, hosted: HostedLog, leader: str, epoch: int) -> None:
        hosted.tracker = None
        hosted.store.log.on_written = None
        hosted.store.resume_after_write_error()
        hosted.leader, hosted.epoch, hosted.role = leader, epoch, "follower"
        if hosted.follower is None:
            hosted.follower = Follower(
                hosted,
                self.node_id,
                self._address_of,
                self.headers,
                self.verify,
                self._truncate,
            )
            hosted.follower.start()
        log.info("following %s", leader, extra=_at(hosted))

    def _log_ids(self) -> list[str]:
        return [] if self.table is None else sorted(self.table.logs)

    def _home_ip(self, log_id: str) -> str | None:
        """The IP of the node a log is named after, where its address says it alone. None
        where addresses are host names (Kubernetes) or share one host (a local cluster):
        then a pod's IP, which a later pod may be given, or this node's IP, which its own
        log carries, would hand out IDs another log hands out too; ``standin_ip`` instead."""
        if self.table is None:
            return None
        hosts = {n.id: urlsplit(n.address).hostname or "" for n in self.table.nodes}
        home = hosts.get(log_id)
        if not home or list(hosts.values()).count(home) != 1:
            return None
        try:
            return str(ipaddress.IPv4Address(home))
        except ValueError:
            return None

    def _address_of(self, node_id: str) -> str | None:
        table = self.table
        if table is None:
            return None
        for node in table.nodes:
            if node.id == node_id:
                return node.address
        return None

    def _truncate(self, hosted: HostedLog, position: int, start_at: int | None) -> None:
        """(The copy loop.) Cut the copy back to ``position`` (KIP-101), or, with
        ``start_at``, empty it and begin at that position."""
        old = hosted.store
        hosted.truncations += 1
        cut_from = position if start_at is None else old.log.start_pos
        hosted.truncated_bytes += max(0, old.log.end - cut_from)
        old.close()
        directory = hosted.dir
        if start_at is not None or not _cut_log(directory, position):
            keep = hosted.node_ip()
            shutil.rmtree(directory)
            os.makedirs(directory)
            if keep:
                hosted.remember_node_ip(keep)
            hosted.epochs = LeaderEpochs(directory)
        hosted.epochs.truncate(position)
        config = dataclasses.replace(self.config, data_dir=directory)
        store = Store.open(config)
        if start_at is not None:
            store.log.restart_at(start_at)  # just opened: nothing appends yet
        if self.table is not None:
            for name, route in self.table.topics.items():
                if name not in store.topics.topics:
                    store.create_topic(routed_topic(route))
        hosted.store = store

    # -- requests -----------------------------------------------------------------------
    def led(self, log_id: str) -> HostedLog:
        """The log if this node leads it and may write it (else 421 / 409 / 503)."""
        hosted = self.logs.get(log_id)
        if hosted is not None and hosted.role == "recovering":
            raise Unavailable(f"log {log_id!r} waits for its leader to be named", retry_after_s=1)
        if hosted is None or hosted.role != "leader":
            leader = hosted.leader if hosted is not None else None
            raise NotOwner(f"this node does not lead log {log_id!r}", owner_id=leader)
        if hosted.stale:
            raise Fenced(f"log {log_id!r} has a newer leader epoch than {hosted.epoch}")
        log_ = hosted.store.log
        if log_.error is not None and hosted.shipped_end > log_.durable_end:
            # A write failed after followers copied its bytes (shipping precedes the
            # fsync): resuming here would write other bytes at positions they hold under
            # the same epoch. The controller names a leader under a new epoch instead.
            hosted.role = "recovering"
            log.warning("a shipped write failed; waiting for a new epoch", extra=_at(hosted))
            raise Unavailable(f"log {log_id!r} waits for its leader to be named", retry_after_s=1)
        return hosted

    def led_stores(self) -> list[Store]:
        return [h.store for _i, h in sorted(self.logs.items()) if h.role == "leader"]

    def fence(self, log_id: str, epoch: int) -> dict[str, Any]:
        """(The controller, before it names a new leader.) Stop copying from leaders older
        than ``epoch`` and say how far this copy goes."""
        hosted = self.logs.get(log_id)
        if hosted is None:
            raise Unavailable(f"log {log_id!r} is not hosted here")
        check_epoch(epoch, hosted.fenced_epoch, "a fence")
        hosted.fenced_epoch = epoch
        if hosted.role == "leader" and hosted.epoch < epoch:
            hosted.stale = True
        log_ = hosted.store.log
        return {"log": log_id, "position": log_.durable_end, "epoch": hosted.epochs.latest}

    def status(self) -> dict[str, Any]:
        logs = {i: h.status() for i, h in sorted(self.logs.items())}
        factor = self.table.replication_factor if self.table is not None else 1
        under = sorted(
            i for i, d in logs.items() if d["role"] == "leader" and d.get("in_sync", 1) < factor
        )
        return {"node": self.node_id, "logs": logs, "under_replicated": under}


def list_segments(directory: str) -> list[int]:
    """Start positions of the segment files in a folder."""
    if not os.path.isdir(directory):
        return []
    found = (parse_segment_name(n) for n in os.listdir(directory))
    return sorted(s for s in found if s is not None)


def _cut_log(directory: str, position: int) -> bool:
    """Cut a closed store's log back to ``position`` and make recovery rebuild every index
    from the log; False when that would cut into a sealed (compacted/uploaded) segment."""
    base = os.path.join(directory, "commitlog")
    unsealed = os.path.join(base, "unsealed")
    sealed = [s for state in ("compacted", "uploaded") for s in list_segments(f"{base}/{state}")]
    open_starts = list_segments(unsealed)
    if sealed and (not open_starts or open_starts[0] > position):
        return False  # ``position`` lies in a sealed segment
    for start in list_segments(unsealed):
        path = os.path.join(unsealed, segment_name(start))
        if start >= position and start > 0:
            os.remove(path)
        elif os.path.getsize(path) > position - start:
            os.truncate(path, position - start)
    for name in ("checkpoint", "producers.json"):
        try:
            os.remove(os.path.join(directory, name))
        except FileNotFoundError:
            pass
    return True
