"""The failover controller of replicated stores, run by the operator.

The operator owns the routing table (its ConfigMap), so it is the one owner of leader
changes in Kubernetes (docs/REPLICATION.md): for every MessageStore whose table has
replicated logs it runs the same ``Controller`` as ``msgstore local``, in a thread, reading
and writing the table through the routing ConfigMap. A table change is written under the
store's pass lock, so a reconcile pass (which keeps the published leaders and epochs) and a
failover never interleave. The controller also hands each node the new table directly: a
mounted ConfigMap reaches the pods only at the kubelet's next sync, up to a minute later.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from storage_node.errors import MsgStoreError
from storage_node.replication.controller import Controller
from storage_node.wire.routing_table import RoutingTable, parse_routing

from . import naming, routing
from .children import Owner
from .children.config import build_routing_config_map
from .kube import Kube
from .spec import StoreSpec

log = logging.getLogger("msgstore_operator.failover")

Key = tuple[str, str]  # (namespace, name)


class TableUnavailable(Exception):
    """The routing ConfigMap is missing or holds no valid table."""


@dataclass
class _Running:
    controller: Controller
    stop: threading.Event
    thread: threading.Thread
    ca_dir: str | None


class Failovers:
    """One controller thread per replicated MessageStore."""

    def __init__(self, kube: Kube, timeout_s: float = 5.0, probe_s: float = 1.0) -> None:
        self.kube = kube
        self.timeout_s = timeout_s
        self.probe_s = probe_s
        self._running: dict[Key, _Running] = {}
        self._lock = threading.Lock()

    def _read(self, owner: Owner) -> RoutingTable:
        cm = self.kube.get(
            "v1", "ConfigMap", owner.namespace, naming.routing_config_map_name(owner.name)
        )
        text = ((cm or {}).get("data") or {}).get(naming.ROUTING_KEY)
        if not text:
            raise TableUnavailable(f"no routing table published for {owner.name}")
        try:
            return parse_routing(json.loads(text))
        except (ValueError, MsgStoreError) as exc:
            raise TableUnavailable(f"the routing table of {owner.name} is invalid: {exc}") from exc

    def _updater(
        self, owner: Owner, lock: threading.Lock
    ) -> Callable[[Callable[[RoutingTable], RoutingTable | None]], RoutingTable]:
        def update(change: Callable[[RoutingTable], RoutingTable | None]) -> RoutingTable:
            with lock:  # the store's pass lock: no reconcile pass in between
                table = self._read(owner)
                new = change(table)
                if new is None:
                    return table
                text = routing.dumps(new.to_json())
                self.kube.apply(build_routing_config_map(owner, text))
                log.warning(
                    "%s/%s: routing table generation %d published by the failover controller",
                    owner.namespace,
                    owner.name,
                    new.generation,
                )
                return new

        return update

    def _credentials(
        self, owner: Owner, spec: StoreSpec
    ) -> tuple[dict[str, str], str | bool, str | None]:
        """The API token header and the CA file nodes are verified with (TLS)."""
        headers: dict[str, str] = {}
        if spec.auth.enabled:
            name = spec.auth.token_secret or naming.token_secret_name(owner.name)
            secret = self.kube.get("v1", "Secret", owner.namespace, name) or {}
            raw = (secret.get("data") or {}).get(spec.auth.token_key)
            if raw:
                headers["Authorization"] = "Bearer " + base64.b64decode(raw).decode().strip()
        if not spec.tls.enabled:
            return headers, True, None
        cm = self.kube.get(
            "v1", "ConfigMap", owner.namespace, naming.ca_config_map_name(owner.name)
        )
        pem = ((cm or {}).get("data") or {}).get(naming.CA_KEY)
        if not pem:
            raise TableUnavailable(f"the CA ConfigMap of {owner.name} is not there yet")
        ca_dir = tempfile.mkdtemp(prefix="msgstore-ca-")
        path = os.path.join(ca_dir, naming.CA_KEY)
        with open(path, "w") as fh:
            fh.write(pem)
        return headers, path, ca_dir

    def ensure(self, owner: Owner, spec: StoreSpec, lock: threading.Lock) -> None:
        """Run a controller for this store if its spec is replicated (stop it otherwise)."""
        key = (owner.namespace, owner.name)
        if spec.replication_factor <= 1:
            self.stop(key)
            return
        with self._lock:
            if key in self._running:
                return
            try:
                headers, verify, ca_dir = self._credentials(owner, spec)
            except TableUnavailable as exc:
                log.info("%s/%s: failover controller not started yet: %s", *key, exc)
                return

            def read() -> RoutingTable:
                return self._read(owner)

            controller = Controller(
                read,
                self._updater(owner, lock),
                headers,
                verify,
                self.timeout_s,
                self.probe_s,
            )
            stop = threading.Event()
            thread = threading.Thread(
                target=controller.run, args=(stop,), name=f"failover-{owner.name}", daemon=True
            )
            self._running[key] = _Running(controller, stop, thread, ca_dir)
            thread.start()
            log.info("%s/%s: failover controller started", *key)

    def stop(self, key: Key) -> None:
        with self._lock:
            running = self._running.pop(key, None)
        if running is None:
            return
        running.stop.set()
        running.thread.join(timeout=10)
        if running.ca_dir:
            shutil.rmtree(running.ca_dir, ignore_errors=True)
        log.info("%s/%s: failover controller stopped", *key)

    def retain(self, keys: set[Key]) -> None:
        """Stop the controllers of stores that are gone."""
        with self._lock:
            gone = [k for k in self._running if k not in keys]
        for key in gone:
            self.stop(key)

    def stop_all(self) -> None:
        self.retain(set())

    def report(self, key: Key, table: Mapping[str, Any]) -> dict[str, Any] | None:
        """The status block of a replicated store (None when it is not replicated)."""
        with self._lock:
            running = self._running.get(key)
        return replication_status(table, running.controller if running else None)


def replication_status(
    doc: Mapping[str, Any], controller: Controller | None
) -> dict[str, Any] | None:
    """What the MessageStore status says about replication, from the published table
    (``doc``) and the nodes' last answers to the controller: per log its leader, epoch,
    copies in sync and the largest follower lag; the under-replicated logs."""
    logs = doc.get("logs") or {}
    if not logs:
        return None
    rep = doc.get("replication") or {}
    factor = int(rep.get("factor", 1))
    statuses = controller.statuses if controller is not None else {}
    rows: list[dict[str, Any]] = []
    under: list[str] = []
    for log_id, route in sorted(logs.items()):
        leader_doc = (statuses.get(route["leader"]) or {}).get("logs", {}).get(log_id) or {}
        known = leader_doc.get("role") == "leader" and route.get("epoch", 0) > 0
        in_sync = int(leader_doc.get("in_sync", 1)) if known else 0
        followers = leader_doc.get("followers") or {}
        lag = max((int(f.get("lag_bytes", 0)) for f in followers.values()), default=0)
        rows.append(
            {
                "log": log_id,
                "leader": route["leader"],
                "epoch": int(route.get("epoch", 0)),
                "inSync": in_sync,
                "lagBytes": lag,
            }
        )
        if in_sync < factor:
            under.append(log_id)
    # every leader naming, the first ones of a new store included
    changes = list(controller.failovers) if controller is not None else []
    out: dict[str, Any] = {
        "factor": factor,
        "minInSync": int(rep.get("min_in_sync", factor)),
        "logs": rows,
        "underReplicated": under,
        "leaderChanges": len(changes),
    }
    if changes:
        last = changes[-1]
        out["lastLeaderChange"] = (
            f"log {last['log']}: {last['old_leader']} -> {last['new_leader']} "
            f"(epoch {last['epoch']}, {last['seconds']}s)"
        )
    return out
