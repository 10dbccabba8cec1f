"""The certificates of a local cluster served over HTTPS, kept in ``DIR/tls``:

- ``ca.crt``: the CA bundle everybody trusts (the nodes' ``MSGSTORE_TLS_CA``, the clients'
  ``--ca``): one CA, two while ``msgstore local rotate-ca`` introduces a new one;
- ``ca.key``: the key of the CA that issues; its certificate is the bundle's one it matches;
- ``ca-next.crt``/``ca-next.key``: the CA a rotation introduces, until it is the only one;
- ``node-<i>.crt``/``.key``: each node's certificate (OU ``msgstore-node``);
- ``controller.crt``/``.key``: the failover controller's (OU ``msgstore-controller``).

Certificates are reissued when missing, changed, of another CA or due for renewal.
"""

from __future__ import annotations

import os
from pathlib import Path

from storage_node import tls
from storage_node.errors import InvalidArgument

CONTROLLER = "controller"
CONTROLLER_NAMES = ["msgstore-controller"]


def write_bundle(directory: Path, certs: list[bytes]) -> Path:
    """Replace ``ca.crt`` atomically with these CA certificates (PEM, in order)."""
    path = directory / "ca.crt"
    tmp = path.with_name("ca.crt.tmp")
    tmp.write_bytes(b"".join(c if c.endswith(b"\n") else c + b"\n" for c in certs))
    os.replace(tmp, path)
    return path


def signing_ca(directory: Path) -> tls.CertKey | None:
    """The CA that issues: ``ca.key`` with the certificate of the bundle it matches (None
    when there is no CA yet)."""
    try:
        key_pem = (directory / "ca.key").read_bytes()
        bundle = (directory / "ca.crt").read_bytes()
    except FileNotFoundError:
        return None
    from cryptography.hazmat.primitives import serialization

    for cert in tls.read_bundle(bundle):
        pem = cert.public_bytes(serialization.Encoding.PEM)
        if tls.key_matches(pem, key_pem):
            return tls.CertKey(pem, key_pem)
    raise InvalidArgument(
        f"{directory / 'ca.key'} matches no CA of {directory / 'ca.crt'}: a CA rotation was "
        "interrupted; run 'msgstore local rotate-ca' again"
    )


def ensure_local_tls(directory: Path, node_ids: list[str], host: str) -> Path:
    """A CA in ``directory`` (made once, kept across runs), a certificate per node for
    localhost and ``host`` and one for the controller, reissued when missing, changed or due
    for renewal."""
    ca = signing_ca(directory)
    if ca is None:
        ca = tls.new_ca(f"msgstore local CA {directory.parent.name}")
        tls.write_pair(directory, "ca", ca)
    issue_local_certs(directory, ca, node_ids, host)
    return directory / "ca.crt"


def issue_local_certs(directory: Path, ca: tls.CertKey, node_ids: list[str], host: str) -> None:
    """(Re)issue under ``ca`` every node certificate and the controller's that needs it."""
    dns = ["localhost"]
    ips = sorted({"127.0.0.1", host}) if _is_ip(host) else ["127.0.0.1"]
    if not _is_ip(host):
        dns.append(host)
    wanted = [(n, dns, ips, tls.NODE_UNIT) for n in node_ids]
    wanted.append((CONTROLLER, CONTROLLER_NAMES, [], tls.CONTROLLER_UNIT))
    for stem, names, addresses, unit in wanted:
        current = tls.read_pair(directory, stem)
        why = tls.renewal_reason(current, ca.cert_pem, names, addresses, unit=unit)
        if why is not None:
            pair = tls.issue_cert(ca, stem, names, addresses, unit=unit)
            tls.write_pair(directory, stem, pair)


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
