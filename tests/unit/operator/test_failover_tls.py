"""The operator's failover controller presents a client certificate to the nodes (mTLS
between nodes): issued from the store's CA Secret with the controller OU, reissued when the
CA changes (a rotation), taken from cert-manager's Secret in that mode; the CA bundle file
follows the CA ConfigMap. The objects are read through ``get`` as from the API server."""

from __future__ import annotations

import base64
import datetime
import os
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from msgstore_operator import naming
from msgstore_operator.children import Owner
from msgstore_operator.children import tls as tls_children
from msgstore_operator.failover import CONTROLLER, Failovers
from msgstore_operator.spec import parse_spec

from storage_node import mtls, tls

OWNER = Owner(name="demo", namespace="ns1", uid="uid-1")


class Objects:
    """The objects the operator reads, by (kind, name)."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], dict[str, Any]] = {}

    def get(self, api: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert namespace == OWNER.namespace
        return self.items.get((kind, name))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def publish_ca(objects: Objects, ca: tls.CertKey, bundle: bytes) -> None:
    objects.items[("Secret", naming.ca_secret_name("demo"))] = tls_children.build_ca_secret(
        OWNER, ca
    )
    objects.items[("ConfigMap", naming.ca_config_map_name("demo"))] = {
        "data": {naming.CA_KEY: bundle.decode()}
    }


def controller_cert(directory: Path) -> tls.CertKey:
    pair = tls.read_pair(directory, CONTROLLER)
    assert pair is not None and tls.key_matches(pair.cert_pem, pair.key_pem)
    return pair


def is_peer(pair: tls.CertKey, trusted: list[tls.CertKey]) -> bool:
    der = pair.cert.public_bytes(serialization.Encoding.DER)
    return mtls.PeerCheck().refusal(der, [t.cert for t in trusted], 0) is None


def test_the_controller_certificate_follows_the_store_ca(tmp_path):
    objects = Objects()
    failovers = Failovers(objects)  # type: ignore[arg-type]
    spec = parse_spec({"replicas": 3, "replicationFactor": 3})
    old = tls_children.new_store_ca(OWNER, datetime.datetime.now(datetime.UTC))
    publish_ca(objects, old, old.cert_pem)
    failovers._write_tls(OWNER, spec, str(tmp_path))
    first = controller_cert(tmp_path)
    assert tls.cert_info(first.cert_pem).units == (tls.CONTROLLER_UNIT,)
    assert is_peer(first, [old])
    assert (tmp_path / naming.CA_KEY).read_bytes() == old.cert_pem
    stamp = os.stat(tmp_path / f"{CONTROLLER}.crt").st_mtime_ns
    failovers._write_tls(OWNER, spec, str(tmp_path))  # nothing due: nothing written
    assert os.stat(tmp_path / f"{CONTROLLER}.crt").st_mtime_ns == stamp
    # a rotation: the bundle holds both, then the new CA issues
    new = tls.new_ca("next CA")
    publish_ca(objects, new, old.cert_pem + new.cert_pem)
    failovers._write_tls(OWNER, spec, str(tmp_path))
    second = controller_cert(tmp_path)
    assert is_peer(second, [new]) and not is_peer(second, [old])
    assert (tmp_path / naming.CA_KEY).read_bytes() == old.cert_pem + new.cert_pem


def test_with_cert_manager_the_controller_presents_the_nodes_certificate(tmp_path):
    objects = Objects()
    failovers = Failovers(objects)  # type: ignore[arg-type]
    spec = parse_spec(
        {"replicas": 3, "replicationFactor": 3, "tls": {"issuerRef": {"name": "corp"}}}
    )
    ca = tls.new_ca("corp CA")
    nodes = tls.issue_cert(ca, "demo.ns1.svc", ["demo.ns1.svc"], unit=tls.NODE_UNIT)
    objects.items[("ConfigMap", naming.ca_config_map_name("demo"))] = {
        "data": {naming.CA_KEY: ca.cert_pem.decode()}
    }
    objects.items[("Secret", naming.certificate_secret_name("demo"))] = {
        "data": {"tls.crt": b64(nodes.cert_pem), "tls.key": b64(nodes.key_pem)}
    }
    failovers._write_tls(OWNER, spec, str(tmp_path))
    assert controller_cert(tmp_path) == nodes
