"""Failover of replicated logs: the one owner of leader changes.

The controller probes every node. When a log's leader has not answered for ``timeout_s``,
it picks the next epoch, fences the log's other replicas with it (each stops copying from
older leaders and reports how far its durable copy goes), promotes the most caught-up one
and writes the routing table with the new leader and epoch. It needs answers from
``replicas - min_in_sync + 1`` of them: an acknowledged write is on ``min_in_sync``
replicas, so at least one that answered holds it, and the most caught-up one holds every
acknowledged write. Copies are prefixes of one history, so "most caught up" is the largest
durable end. ``msgstore local`` runs it as a process (storage_node/cli/controller.py); the
operator would run the same code.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import requests

from storage_node.mtls import PeerIdentity
from storage_node.wire.routing_table import LogRoute, RoutingTable

log = logging.getLogger("msgstore.controller")


class Controller:
    def __init__(
        self,
        read_table: Callable[[], RoutingTable],
        update_table: Callable[[Callable[[RoutingTable], RoutingTable | None]], RoutingTable],
        headers: dict[str, str] | None = None,
        verify: str | bool = True,
        timeout_s: float = 3.0,
        probe_s: float = 0.25,
        identity: PeerIdentity | None = None,
    ) -> None:
        """``identity``: the controller's client certificate and the trusted CAs (mTLS
        between nodes: fences and routing hand-overs need it); without it, ``verify``
        checks the nodes' certificates."""
        self.read_table = read_table
        self.update_table = update_table
        self.headers = headers or {}
        self.verify = verify
        self.timeout_s = timeout_s
        self.probe_s = probe_s
        self.last_ok: dict[str, float] = {}
        self.session = identity.session() if identity is not None else requests.Session()
        self.failovers: list[dict[str, Any]] = []
        # each node's last replication status (None: it did not answer), for reports
        self.statuses: dict[str, dict[str, Any] | None] = {}

    def _probe(self, address: str) -> dict[str, Any] | None:
        """The node's replication status, None when it does not answer."""
        try:
            resp = self.session.get(
                address + "/v1/replication/status",
                headers=self.headers,
                timeout=min(1.0, self.timeout_s / 2),
                verify=self.verify,
            )
            return resp.json() if resp.status_code == 200 else None
        except (requests.RequestException, ValueError):
            return None

    def _offer(self, address: str, table: RoutingTable) -> None:
        """Hand a node the table at once (a node also reloads the shared file or ConfigMap
        by itself, which may take a while: a mounted ConfigMap follows the kubelet's sync)."""
        try:
            self.session.put(
                address + "/v1/replication/routing",
                json=table.to_json(),
                headers=self.headers,
                timeout=2.0,
                verify=self.verify,
            )
        except requests.RequestException as exc:
            log.info("could not hand the routing table to %s: %s", address, exc)

    def step(self) -> None:
        """Probe every node once; fail over the logs whose leader is gone too long, name a
        leader for a log whose named leader is (re)starting (a new cluster's logs, epoch 0,
        and a leader that restarted, perhaps with an empty volume), and finish a failover
        that fenced some replicas but named no leader."""
        table = self.read_table()
        now = time.monotonic()
        recovering: set[str] = set()
        unfinished: set[str] = set()
        for node in table.nodes:
            doc = self._probe(node.address)
            self.statuses[node.id] = doc
            if doc is not None:
                self.last_ok[node.id] = now
                if int(doc.get("generation", table.generation)) < table.generation:
                    self._offer(node.address, table)
                for log_id, state in doc.get("logs", {}).items():
                    route = table.logs.get(log_id)
                    if route is None:
                        continue
                    if route.leader == node.id and state.get("role") == "recovering":
                        recovering.add(log_id)
                    # fenced past the table's epoch by a failover that did not finish (too
                    # few answers, or a controller that stopped midway): the fenced leader
                    # refuses writes, so the failover must be completed
                    if int(state.get("fenced_epoch", 0)) > route.epoch:
                        unfinished.add(log_id)
            else:
                self.last_ok.setdefault(node.id, now)  # counted from the first probe
        for route in table.logs.values():
            gone = now - self.last_ok.get(route.leader, now) > self.timeout_s
            if gone or route.id in recovering or route.id in unfinished:
                self.failover(route.id)

    def failover(self, log_id: str) -> str | None:
        """Promote a new leader of ``log_id``; returns it (None when too few answered)."""
        started = time.monotonic()
        table = self.read_table()
        route = table.logs[log_id]
        epoch = route.epoch + 1
        # the old leader is asked too: answering, it is restarting (and no longer leads)
        others = list(route.replicas)
        need = max(1, len(route.replicas) - table.min_in_sync + 1)
        answers: dict[str, int] = {}
        for node_id in others:
            address = table.node_address_of_node(node_id)
            if address is None:
                continue
            try:
                resp = self.session.post(
                    f"{address}/v1/replication/logs/{log_id}/fence",
                    params={"epoch": epoch},
                    headers=self.headers,
                    timeout=2.0,
                    verify=self.verify,
                )
            except requests.RequestException:
                continue
            if resp.status_code == 200:
                answers[node_id] = int(resp.json()["position"])
        if len(answers) < need:
            log.warning(
                "log %s: leader %s is gone but only %d of the %d replicas needed answered",
                log_id,
                route.leader,
                len(answers),
                need,
                extra={"log": log_id, "epoch": epoch},
            )
            return None
        # the most caught up; on a tie the named leader keeps the log
        chosen = max(sorted(answers), key=lambda n: (answers[n], n == route.leader))

        def promote(current: RoutingTable) -> RoutingTable | None:
            now = current.logs.get(log_id)
            if now is None or now.epoch >= epoch:
                return None  # somebody else decided meanwhile
            logs = dict(current.logs)
            logs[log_id] = LogRoute(log_id, chosen, epoch, now.replicas)
            return current.with_logs(logs)

        new_table = self.update_table(promote)
        for node in new_table.nodes:  # not to the nodes known not to answer (they wait)
            if node.id not in self.statuses or self.statuses[node.id] is not None:
                self._offer(node.address, new_table)
        record = {
            "log": log_id,
            "old_leader": route.leader,
            "new_leader": chosen,
            "epoch": epoch,
            "positions": answers,
            "seconds": round(time.monotonic() - started, 3),
        }
        self.failovers.append(record)
        log.warning("failover %s", record, extra={"log": log_id, "epoch": epoch})
        return chosen

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # noqa: BLE001 - the controller must outlive any one failure
                log.exception("controller step failed")
            stop.wait(self.probe_s)
