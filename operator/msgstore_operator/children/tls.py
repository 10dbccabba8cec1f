"""TLS children: the store's CA (Secret for the operator, ConfigMap for clients), the node
certificates Secret, or a cert-manager Certificate when the spec names an Issuer.

Issuing is pure (``plan_node_certs`` takes the CA, what the Secret holds now and the time);
``reconcile`` reads the live Secrets and applies what these functions return.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from storage_node import tls

from .. import naming
from ..spec import StoreSpec
from .meta import Owner, object_meta

CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"
CA_VALIDITY = datetime.timedelta(days=3650)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def build_ca_secret(owner: Owner, ca: tls.CertKey) -> dict[str, Any]:
    """The CA with its key: created once, read only by the operator (never mounted)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": object_meta(owner, naming.ca_secret_name(owner.name), "tls"),
        "data": {CA_CERT_KEY: _b64(ca.cert_pem), CA_KEY_KEY: _b64(ca.key_pem)},
    }


def ca_from_secret(secret: Mapping[str, Any] | None) -> tls.CertKey | None:
    data = (secret or {}).get("data") or {}
    cert, key = _unb64(data.get(CA_CERT_KEY)), _unb64(data.get(CA_KEY_KEY))
    return tls.CertKey(cert, key) if cert and key else None


def new_store_ca(owner: Owner, now: datetime.datetime) -> tls.CertKey:
    return tls.new_ca(f"msgstore {owner.namespace}/{owner.name} CA", now, CA_VALIDITY)


def build_ca_config_map(owner: Owner, ca_pem: bytes) -> dict[str, Any]:
    """The CA certificate clients and Spark pods mount (public: no key)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(owner, naming.ca_config_map_name(owner.name), "tls"),
        "data": {naming.CA_KEY: ca_pem.decode()},
    }


@dataclass
class CertPlan:
    data: dict[str, str]  # Secret data (base64): <pod>.crt, <pod>.key for every node
    issued: list[tuple[str, str]] = field(default_factory=list)  # (pod, why)

    @property
    def changed(self) -> bool:
        return bool(self.issued)


def plan_node_certs(
    owner: Owner,
    spec: StoreSpec,
    replicas: int,
    domain: str,
    ca: tls.CertKey,
    current: Mapping[str, str],
    now: datetime.datetime,
    renew_fraction: float = tls.DEFAULT_RENEW_FRACTION,
) -> CertPlan:
    """Keep every good node certificate; issue the missing, renamed, foreign-CA or due ones.

    Entries of nodes beyond ``replicas`` are dropped (their pods are gone or going).
    """
    plan = CertPlan(data={})
    validity = datetime.timedelta(days=spec.tls.certificate_validity_days)
    for ordinal in range(replicas):
        pod = naming.pod_name(owner.name, ordinal)
        names = naming.node_cert_names(owner.name, owner.namespace, ordinal, domain)
        extra_names, ips = external_sans(spec)
        names = [*names, *extra_names]
        crt_key, key_key = f"{pod}.crt", f"{pod}.key"
        existing = tls.CertKey(_unb64(current.get(crt_key)), _unb64(current.get(key_key)))
        why = tls.renewal_reason(
            existing, ca.cert_pem, names, ips, now, renew_fraction, tls.NODE_UNIT
        )
        if why is None:
            plan.data[crt_key], plan.data[key_key] = current[crt_key], current[key_key]
            continue
        pair = tls.issue_cert(ca, pod, names, ips, now, validity, tls.NODE_UNIT)
        plan.data[crt_key], plan.data[key_key] = _b64(pair.cert_pem), _b64(pair.key_pem)
        plan.issued.append((pod, why))
    if set(plan.data) != set(current):
        gone = sorted({k.rsplit(".", 1)[0] for k in set(current) - set(plan.data)})
        plan.issued += [(pod, "removed") for pod in gone]
    return plan


def external_sans(spec: StoreSpec) -> tuple[list[str], list[str]]:
    """(DNS names, IP addresses) outside clients use: the external listener's host."""
    if not spec.external.enabled:
        return [], []
    host = spec.external.host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return [host], []
    return [], [host]


def build_node_certs_secret(owner: Owner, data: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": object_meta(owner, naming.node_certs_secret_name(owner.name), "tls"),
        "data": dict(sorted(data.items())),
    }


CERTIFICATE_API = "cert-manager.io/v1"


def build_certificate(owner: Owner, spec: StoreSpec, replicas: int, domain: str) -> dict[str, Any]:
    """One cert-manager Certificate for all nodes: every pod's names (and a wildcard for the
    headless Service, so scaling needs no new certificate), the Services and localhost."""
    assert spec.tls.issuer_ref is not None
    headless = naming.headless_service_name(owner.name)
    names: list[str] = [
        f"*.{headless}.{owner.namespace}.svc.{domain}",
        f"*.{headless}.{owner.namespace}.svc",
    ]
    for ordinal in range(replicas):
        for name in naming.node_cert_names(owner.name, owner.namespace, ordinal, domain):
            if name not in names:
                names.append(name)
    extra_names, ips = external_sans(spec)
    names += [n for n in extra_names if n not in names]
    days = spec.tls.certificate_validity_days
    return {
        "apiVersion": CERTIFICATE_API,
        "kind": "Certificate",
        "metadata": object_meta(owner, naming.certificate_name(owner.name), "tls"),
        "spec": {
            "secretName": naming.certificate_secret_name(owner.name),
            "commonName": f"{owner.name}.{owner.namespace}.svc",
            # the OU that makes it a node's certificate to the other nodes (mTLS)
            "subject": {"organizationalUnits": [tls.NODE_UNIT]},
            "dnsNames": names,
            **({"ipAddresses": ips} if ips else {}),
            "duration": f"{days * 24}h",
            # Renew after two thirds of the lifetime, as the operator's own CA does.
            "renewBefore": f"{days * 8}h",
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "usages": ["server auth", "client auth", "digital signature"],
            "issuerRef": {
                "name": spec.tls.issuer_ref.name,
                "kind": spec.tls.issuer_ref.kind,
                "group": spec.tls.issuer_ref.group,
            },
        },
    }


def ca_from_certificate_secret(secret: Mapping[str, Any] | None) -> bytes | None:
    """cert-manager puts the issuing CA in ``ca.crt`` (CA and self-signed issuers do)."""
    data = (secret or {}).get("data") or {}
    return _unb64(data.get("ca.crt")) or None
