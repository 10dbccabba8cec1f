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
from pathlib import Path
from typing import Any

from storage_node import tls
from storage_node.errors import MsgStoreError
from storage_node.mtls import PeerIdentity
from storage_node.replication.controller import Controller
from storage_node.wire.routing_table import RoutingTable, parse_routing

from . import naming, routing
from .children import Owner
from .children.config import build_routing_config_map
from .children.tls import ca_from_secret
from .kube import Kube
from .spec import StoreSpec

log = logging.getLogger("msgstore_operator.failover")
CONTROLLER = "controller"
CONTROLLER_NAMES = ["msgstore-controller"]

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

    def _headers(self, owner: Owner, spec: StoreSpec) -> dict[str, str]:
        """The API token header (the store's token)."""
        headers: dict[str, str] = {}
        if spec.auth.enabled:
            name = spec.auth.token_secret or naming.token_secret_name(owner.name)
            secret = self.kube.get("v1", "Secret", owner.namespace, name) or {}
            raw = (secret.get("data") or {}).get(spec.auth.token_key)
            if raw:
                headers["Authorization"] = "Bearer " + base64.b64decode(raw).decode().strip()
        return headers

    def _write_tls(self, owner: Owner, spec: StoreSpec, ca_dir: str) -> None:
        """Keep the controller's TLS files in ``ca_dir`` current: the CA bundle of the CA
        ConfigMap (what the nodes trust, two CAs while one is rotated) and the controller's
        client certificate (mTLS between nodes). With the operator's own CA it is issued
        here (OU msgstore-controller) and reissued when due or when the CA changed; with
        cert-manager the nodes' certificate is used. Files are written only when they
        change; the controller's connections pick them up (storage_node/mtls.py)."""
        cm = self.kube.get(
            "v1", "ConfigMap", owner.namespace, naming.ca_config_map_name(owner.name)
        )
        pem = ((cm or {}).get("data") or {}).get(naming.CA_KEY)
        if not pem:
            raise TableUnavailable(f"the CA ConfigMap of {owner.name} is not there yet")
        _write_if_changed(os.path.join(ca_dir, naming.CA_KEY), pem.encode())
        current = tls.read_pair(Path(ca_dir), CONTROLLER)
        if spec.tls.issuer_ref is None:
            ca = ca_from_secret(
                self.kube.get("v1", "Secret", owner.namespace, naming.ca_secret_name(owner.name))
            )
            if ca is None:
                raise TableUnavailable(f"the CA Secret of {owner.name} is not there yet")
            why = tls.renewal_reason(
                current, ca.cert_pem, CONTROLLER_NAMES, unit=tls.CONTROLLER_UNIT
            )
            if why is not None:
                pair = tls.issue_cert(ca, CONTROLLER, CONTROLLER_NAMES, unit=tls.CONTROLLER_UNIT)
                tls.write_pair(Path(ca_dir), CONTROLLER, pair)
                log.info("%s/%s: controller certificate issued (%s)", *_key(owner), why)
            return
        secret = self.kube.get(
            "v1", "Secret", owner.namespace, naming.certificate_secret_name(owner.name)
        )
        data = (secret or {}).get("data") or {}
        if not data.get("tls.crt") or not data.get("tls.key"):
            raise TableUnavailable(f"the certificate Secret of {owner.name} is not there yet")
        pair = tls.CertKey(base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"]))
        if current != pair:
            tls.write_pair(Path(ca_dir), CONTROLLER, pair)

    def ensure(self, owner: Owner, spec: StoreSpec, lock: threading.Lock) -> None:
        """Run a controller for this store if its spec is replicated (stop it otherwise);
        keep a running one's TLS files current."""
        key = (owner.namespace, owner.name)
        if spec.replication_factor <= 1:
            self.stop(key)
            return
        with self._lock:
            running = self._running.get(key)
            if running is not None:
                if running.ca_dir and spec.tls.enabled:
                    try:
                        self._write_tls(owner, spec, running.ca_dir)
                    except TableUnavailable as exc:
                        log.info("%s/%s: controller TLS files kept: %s", *key, exc)
                return
            headers = self._headers(owner, spec)
            identity: PeerIdentity | None = None
            ca_dir: str | None = None
            if spec.tls.enabled:
                ca_dir = tempfile.mkdtemp(prefix="msgstore-ca-")
                try:
                    self._write_tls(owner, spec, ca_dir)
                except TableUnavailable as exc:
                    shutil.rmtree(ca_dir, ignore_errors=True)
                    log.info("%s/%s: failover controller not started yet: %s", *key, exc)
                    return
                identity = PeerIdentity(
                    os.path.join(ca_dir, naming.CA_KEY),
                    os.path.join(ca_dir, f"{CONTROLLER}.crt"),
                    os.path.join(ca_dir, f"{CONTROLLER}.key"),
                )

            def read() -> RoutingTable:
                return self._read(owner)

            controller = Controller(
                read,
                self._updater(owner, lock),
                headers,
                True,
                self.timeout_s,
                self.probe_s,
                identity=identity,
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


def _key(owner: Owner) -> Key:
    return (owner.namespace, owner.name)


def _write_if_changed(path: str, data: bytes) -> None:
    try:
        with open(path, "rb") as fh:
            if fh.read() == data:
                return
    except FileNotFoundError:
        pass
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
