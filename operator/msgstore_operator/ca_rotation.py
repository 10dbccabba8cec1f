"""Rotating a store's own CA without restarting a node (docs/SECURITY.md, "CA rotation").

Asked for by annotating Secret ``<store>-ca`` with ``msgstore.io/rotate-ca=<any new value>``.
The Secret then holds both CAs during the overlap (``ca.crt``/``ca.key``, the current one;
``ca-next.crt``/``ca-next.key``, the new one) and its phase annotation, and each status pass
advances at most one step once the nodes show the previous one took effect:

1. ``trusting``: the CA ConfigMap (every node's ``MSGSTORE_TLS_CA``, the clients' CA) holds
   both; next when every node accepts a handshake with a probe certificate of the new CA.
2. ``reissuing``: node certificates are issued by the new CA; next when every node serves one.
3. retired: the new CA becomes ``ca.crt``/``ca.key``, the ConfigMap holds it alone, and the
   value of the annotation is recorded as handled.

``advance`` is pure (the nodes' answers come as callables); ``step`` reads and writes the
Secret and probes the nodes.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from storage_node import mtls, tls

from . import naming
from .children.meta import Owner, object_meta
from .children.tls import CA_CERT_KEY, CA_KEY_KEY, CA_VALIDITY
from .kube import Kube
from .spec import StoreSpec

log = logging.getLogger("msgstore_operator.ca_rotation")
ROTATE_ANNOTATION = "msgstore.io/rotate-ca"
HANDLED_ANNOTATION = "msgstore.io/ca-rotation-handled"
PHASE_ANNOTATION = "msgstore.io/ca-rotation-phase"
NEXT_CERT_KEY, NEXT_KEY_KEY = "ca-next.crt", "ca-next.key"
TRUSTING, REISSUING = "trusting", "reissuing"


@dataclass(frozen=True)
class CaState:
    current: tls.CertKey
    next: tls.CertKey | None = None
    phase: str = ""  # "", TRUSTING or REISSUING
    handled: str = ""  # the rotate-ca value acted on last

    def bundle(self) -> bytes:
        """What the nodes and clients trust: the current CA, and the next during a rotation."""
        certs = [self.current.cert_pem] + ([self.next.cert_pem] if self.next else [])
        return b"".join(c if c.endswith(b"\n") else c + b"\n" for c in certs)

    def issuing(self) -> tls.CertKey:
        """The CA node certificates are issued by now."""
        return self.next if self.phase == REISSUING and self.next else self.current


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def read_state(secret: Mapping[str, Any], current: tls.CertKey) -> CaState:
    data = secret.get("data") or {}
    notes = (secret.get("metadata") or {}).get("annotations") or {}
    cert, key = _unb64(data.get(NEXT_CERT_KEY)), _unb64(data.get(NEXT_KEY_KEY))
    nxt = tls.CertKey(cert, key) if cert and key else None
    phase = notes.get(PHASE_ANNOTATION, "") if nxt else ""
    return CaState(
        current,
        nxt,
        phase if phase in (TRUSTING, REISSUING) else "",
        notes.get(HANDLED_ANNOTATION, ""),
    )


def build_secret(owner: Owner, state: CaState) -> dict[str, Any]:
    """Secret ``<store>-ca`` holding ``state`` (both CAs during a rotation)."""
    b64 = base64.b64encode
    data = {
        CA_CERT_KEY: b64(state.current.cert_pem).decode(),
        CA_KEY_KEY: b64(state.current.key_pem).decode(),
    }
    if state.next is not None:
        data[NEXT_CERT_KEY] = b64(state.next.cert_pem).decode()
        data[NEXT_KEY_KEY] = b64(state.next.key_pem).decode()
    meta = object_meta(owner, naming.ca_secret_name(owner.name), "tls")
    meta["annotations"] = {PHASE_ANNOTATION: state.phase, HANDLED_ANNOTATION: state.handled}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta, "data": data}


def advance(
    owner: Owner,
    state: CaState,
    requested: str,
    trusts_next: Callable[[], bool],
    serves_next: Callable[[], bool],
    now: datetime.datetime,
) -> tuple[CaState, str | None]:
    """At most one step of the rotation; the new state and what happened (None: nothing)."""
    if not state.phase:
        if requested and requested != state.handled:
            stamp = now.strftime("%Y%m%d%H%M%S")
            nxt = tls.new_ca(
                f"msgstore {owner.namespace}/{owner.name} CA {stamp}", now, CA_VALIDITY
            )
            new = CaState(state.current, nxt, TRUSTING, requested)
            return new, "CA rotation started: the nodes and clients trust the new CA too"
        return state, None
    if state.phase == TRUSTING and trusts_next():
        return replace(state, phase=REISSUING), "every node trusts the new CA; reissuing"
    if state.phase == REISSUING and state.next is not None and serves_next():
        return CaState(state.next, None, "", state.handled), "the old CA is retired"
    return state, None


def _node_hosts(owner: Owner, spec: StoreSpec, replicas: int, domain: str) -> list[str]:
    return [naming.pod_dns_name(owner.name, owner.namespace, i, domain) for i in range(replicas)]


def step(
    kube: Kube,
    owner: Owner,
    spec: StoreSpec,
    replicas: int,
    domain: str,
    secret: Mapping[str, Any],
    current: tls.CertKey,
    now: datetime.datetime,
    events: list[tuple[str, str, str]],
) -> CaState:
    """Advance the rotation of the store's CA by what the nodes answer; returns the state
    the pass goes on with (the ConfigMap's bundle, the issuing CA)."""
    state = read_state(secret, current)
    notes = (secret.get("metadata") or {}).get("annotations") or {}
    requested = str(notes.get(ROTATE_ANNOTATION, ""))
    if not state.phase and (not requested or requested == state.handled):
        return state
    hosts = _node_hosts(owner, spec, replicas, domain)
    with tempfile.TemporaryDirectory(prefix="msgstore-rotation-") as tmp:
        bundle_file = os.path.join(tmp, "bundle.crt")
        with open(bundle_file, "wb") as fh:
            fh.write(state.bundle())

        def trusts_next() -> bool:
            assert state.next is not None
            probe = tls.issue_cert(state.next, "rotation probe", ["msgstore-rotation-probe"])
            return all(
                mtls.accepts_client_certificate(h, spec.port, bundle_file, probe, h) is True
                for h in hosts
            )

        def serves_next() -> bool:
            assert state.next is not None
            subject = state.next.cert.subject
            return all(mtls.served_issuer(h, spec.port, bundle_file, h) == subject for h in hosts)

        new, what = advance(owner, state, requested, trusts_next, serves_next, now)
    if new != state:
        kube.apply(build_secret(owner, new))
        events.append(
            ("info", "CARotation", f"{what} (Secret {naming.ca_secret_name(owner.name)})")
        )
        log.info("%s/%s: %s", owner.namespace, owner.name, what)
    return new
