"""The certificates of a local cluster served over HTTPS: a CA kept in ``DIR/tls`` and one
certificate per node, reissued when missing, changed or due for renewal."""

from __future__ import annotations

from pathlib import Path


def ensure_local_tls(directory: Path, node_ids: list[str], host: str) -> Path:
    """A CA in ``directory`` (made once, kept across runs) and a certificate per node for
    localhost and ``host``, reissued when missing, changed or due for renewal."""
    from storage_node import tls

    ca = tls.read_pair(directory, "ca")
    if ca is None:
        ca = tls.new_ca(f"msgstore local CA {directory.parent.name}")
        tls.write_pair(directory, "ca", ca)
    dns = ["localhost"]
    ips = sorted({"127.0.0.1", host}) if _is_ip(host) else ["127.0.0.1"]
    if not _is_ip(host):
        dns.append(host)
    for node_id in node_ids:
        current = tls.read_pair(directory, node_id)
        if tls.renewal_reason(current, ca.cert_pem, dns, ips) is not None:
            tls.write_pair(directory, node_id, tls.issue_cert(ca, node_id, dns, ips))
    return directory / "ca.crt"


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
