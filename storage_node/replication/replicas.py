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
import logging
import os
import shutil
import threading
from typing import Any
from urllib.parse import urlsplit

from storage_node.errors import CorruptData, Fenced, NotLeader, Unavailable
from storage_node.formats.filenames import LOGS_DIR
from storage_node.mtls import PeerIdentity
from storage_node.replication.epochs import LeaderEpochs, check_epoch
from storage_node.replication.follower import Follower
from storage_node.replication.hosted_log import HostedLog, ensure_topics
from storage_node.replication.insync import InSyncTracker
from storage_node.replication.log_identity import standin_ip
from storage_node.store import Store, StoreConfig, TopicConfig
from storage_node.wire.routing_table import RoutingTable, TopicRoute

log = logging.getLogger(__name__)


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
        config: StoreConfig,
        headers: dict[str, str],
        verify: str | bool,
        ack_timeout_s: float = 5.0,
        identity: PeerIdentity | None = None,
    ) -> None:
        """``identity``: this node's certificate and trusted CAs for fetching from leaders
        (mTLS); without it, ``verify`` checks the leaders' certificates."""
        self.node_id = node_id
        self.root = os.path.join(data_dir, LOGS_DIR)
        self.config = config
        self.headers = headers
        self.verify = verify
        self.identity = identity
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

    # -- the partition service's LogSet (storage_node/partitions/log_set.py) -------------
    offsets_in_log = True  # group commits go into the log: its copies hold them

    def own_store(self) -> Store | None:
        hosted = self.logs.get(self.node_id)
        return hosted.store if hosted is not None else None

    def leader_store(self, log_id: str | None) -> Store:
        return self.led(log_id or self.node_id).store

    def hosted_store(self, log_id: str | None) -> Store | None:
        hosted = self.logs.get(log_id or self.node_id)
        return hosted.store if hosted is not None else None

    def hosted_stores(self) -> list[Store]:
        return [h.store for _i, h in sorted(self.logs.items())]

    def hosted_logs(self) -> dict[str, tuple[Store, bool]]:
        return {i: (h.store, h.role == "leader") for i, h in sorted(self.logs.items())}

    def led_logs(self) -> dict[str, Store]:
        return {i: h.store for i, h in sorted(self.logs.items()) if h.role == "leader"}

    async def copies(self, log_id: str | None, store: Store) -> int | None:
        hosted = self.led(log_id or self.node_id)
        tracker = hosted.tracker
        assert tracker is not None
        ends = store.log_ends()
        if not ends.sync_mode:
            return tracker.copies(ends.end)
        copies = await tracker.wait_copies(ends.durable_end, ends.durable_end, self.ack_timeout_s)
        self.led(log_id or self.node_id)  # not replaced meanwhile
        return copies

    def close(self) -> None:
        for hosted in list(self.logs.values()):
            if hosted.follower is not None:
                hosted.follower.close()
            hosted.store.close()
        self.logs.clear()

    # -- the routing table --------------------------------------------------------------
    def apply(self, table: RoutingTable) -> None:
        """(Blocking.) Open, promote, demote and follow as the table says; CorruptData
        (after acting on every other log) when a log to lead has an unreadable log.json."""
        with self._apply_lock:
            self.table = table
            failed: list[CorruptData] = []
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
                    try:
                        self._lead(hosted, route.epoch, followers, table.min_in_sync)
                    except CorruptData as exc:  # the other logs still follow the table
                        log.error("log %s: cannot lead it: %s", log_id, exc)
                        failed.append(exc)
                else:
                    self._follow(hosted, route.leader, route.epoch)
            for log_id in [i for i in self.logs if i not in wanted]:
                hosted = self.logs.pop(log_id)
                if hosted.follower is not None:
                    hosted.follower.close()
                hosted.store.close()
            if failed:
                raise failed[0]

    def _lead(self, hosted: HostedLog, epoch: int, followers: list[str], min_in_sync: int) -> None:
        # first, before anything changes: an unreadable log.json leaves the log unled
        # (CorruptData), never led with a stand-in IP that would change its message IDs
        ip = hosted.node_ip()
        if hosted.follower is not None:
            hosted.follower.close()
            hosted.follower = None
        hosted.store.resume_after_write_error()
        store = hosted.store
        store.flush_log()
        if not hosted.epochs.entries or hosted.epochs.latest < epoch:
            hosted.epochs.begin(epoch, store.log_ends().end)
        if ip is None:  # the log's first leader, or a copy that never heard from one
            ip = self._home_ip(hosted.id) or standin_ip(hosted.id, self._log_ids())
            hosted.remember_node_ip(ip)
        store.set_node_ip(ip)  # message IDs keep the log's IP across failovers
        hosted.tracker = InSyncTracker(followers, min_in_sync)
        # bytes are shipped once written, before the leader's own fsync ends: the two disks
        # work at once; one subscription per led log wakes the fetches waiting on it
        store.subscribe_written(hosted.tracker.grew_elsewhere)
        hosted.stale = False
        hosted.shipped_end = 0
        hosted.leader, hosted.epoch, hosted.role = self.node_id, epoch, "leader"
        log.info("leading from position %d", store.log_ends().end, extra=_at(hosted))

    def _follow(self, hosted: HostedLog, leader: str, epoch: int) -> None:
        hosted.tracker = None
        hosted.store.subscribe_written(None)
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
                self.identity,
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
        ``start_at`` (or a cut into a sealed segment), empty it and begin at ``start_at``."""
        ends = hosted.store.log_ends()
        hosted.truncations += 1
        cut_from = position if start_at is None else ends.start
        hosted.truncated_bytes += max(0, ends.end - cut_from)
        if start_at is None and hosted.store.truncate_to(position):
            hosted.epochs.truncate(position)
            return
        hosted.store.close()
        directory = hosted.dir
        try:  # the leader's next answer names the IP again if this copy lost it
            keep = hosted.node_ip()
        except CorruptData:
            keep = None
        shutil.rmtree(directory)
        os.makedirs(directory)
        if keep:
            hosted.remember_node_ip(keep)
        hosted.epochs = LeaderEpochs(directory)
        config = dataclasses.replace(self.config, data_dir=directory)
        store = Store.open(config)
        if start_at is not None:
            store.restart_log_at(start_at)  # just opened: nothing appends yet
        if self.table is not None:
            ensure_topics(store, [routed_topic(r) for r in self.table.topics.values()])
        hosted.store = store

    # -- requests -----------------------------------------------------------------------
    def led(self, log_id: str) -> HostedLog:
        """The log if this node leads it and may write it (else 421 / 409 / 503)."""
        hosted = self.logs.get(log_id)
        if hosted is not None and hosted.role == "recovering":
            raise Unavailable(f"log {log_id!r} waits for its leader to be named", retry_after_s=1)
        if hosted is None or hosted.role != "leader":
            leader = hosted.leader if hosted is not None else None
            route = self.table.logs.get(log_id) if self.table is not None else None
            raise NotLeader(
                f"this node does not lead log {log_id!r}",
                leader_id=leader,
                leader_address=self._address_of(leader) if leader else None,
                epoch=route.epoch if route is not None else (hosted.epoch if hosted else 0),
                owner_id=leader,
            )
        if hosted.stale:
            raise Fenced(f"log {log_id!r} has a newer leader epoch than {hosted.epoch}")
        ends = hosted.store.log_ends()
        if ends.failed and hosted.shipped_end > ends.durable_end:
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
        position = hosted.store.log_ends().durable_end
        return {"log": log_id, "position": position, "epoch": hosted.epochs.latest}

    def status(self) -> dict[str, Any]:
        logs = {i: h.status() for i, h in sorted(self.logs.items())}
        factor = self.table.replication_factor if self.table is not None else 1
        under = sorted(
            i for i, d in logs.items() if d["role"] == "leader" and d.get("in_sync", 1) < factor
        )
        return {"node": self.node_id, "logs": logs, "under_replicated": under}
