"""``msgstore local rotate-ca``: replace the CA of a running local TLS cluster without
restarting a node (docs/SECURITY.md, "CA rotation").

1. A new CA (``ca-next``) joins the bundle ``ca.crt``; every running node reloads it (a
   handshake with a probe certificate of the new CA is accepted).
2. Every node certificate and the controller's is reissued under the new CA; every node
   serves its new certificate.
3. The new CA becomes the issuing one (``ca.key``) and the only one of the bundle; every
   node refuses a probe certificate of the old CA.

Each step waits on what the nodes answer, never on a fixed time. An interrupted rotation is
resumed by running the command again (``ca-next`` is kept until the last step).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from storage_node import tls
from storage_node.cli.local_tls import issue_local_certs, signing_ca, write_bundle
from storage_node.errors import InvalidArgument, Unavailable
from storage_node.mtls import accepts_client_certificate, served_issuer

if TYPE_CHECKING:
    from storage_node.cli.local import LocalCluster
    from storage_node.cli.local_state import NodeProcess

NEXT = "ca-next"


def _wait(what: str, done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise Unavailable(f"CA rotation: {what} not seen after {timeout:.0f}s")
        time.sleep(0.1)


def rotate_ca(
    cluster: LocalCluster, timeout: float = 120.0, say: Callable[[str], None] = print
) -> tls.CertKey:
    """Run the three steps on ``cluster``; returns the new CA."""
    directory = cluster.tls_dir
    if directory is None:
        raise InvalidArgument(f"the cluster in {cluster.dir} does not serve TLS (local up --tls)")
    old = signing_ca(directory)
    if old is None:
        raise InvalidArgument(f"no CA in {directory}; start the cluster with 'local up --tls'")
    new = tls.read_pair(directory, NEXT)
    if new is None or tls.key_matches(old.cert_pem, new.key_pem):
        new = tls.new_ca(f"msgstore local CA {cluster.dir.name} {time.strftime('%Y%m%d%H%M%S')}")
        tls.write_pair(directory, NEXT, new)
    bundle = directory / "ca.crt"
    nodes = cluster.running()
    ids = [n.id for n in cluster.nodes]

    def all_nodes(check: Callable[[NodeProcess], bool]) -> Callable[[], bool]:
        return lambda: all(check(n) for n in nodes)

    # 1. trust both
    write_bundle(directory, [old.cert_pem, new.cert_pem])
    probe_new = tls.issue_cert(new, "rotation probe", ["localhost"])
    _wait(
        "every node trusting the new CA",
        all_nodes(
            lambda n: accepts_client_certificate(cluster.host, n.port, bundle, probe_new) is True
        ),
        timeout,
    )
    say(f"1/3 every node trusts the new CA too ({bundle} holds both)")
    # 2. reissue under the new CA
    issue_local_certs(directory, new, ids, cluster.host)
    _wait(
        "every node serving a certificate of the new CA",
        all_nodes(lambda n: served_issuer(cluster.host, n.port, bundle) == new.cert.subject),
        timeout,
    )
    say("2/3 every node and the controller hold a certificate of the new CA")
    # 3. retire the old CA: the issuing key first (ca.crt still holds its certificate)
    _write_key(directory / "ca.key", new.key_pem)
    write_bundle(directory, [new.cert_pem])
    for suffix in (".crt", ".key"):
        (directory / f"{NEXT}{suffix}").unlink(missing_ok=True)
    probe_old = tls.issue_cert(old, "rotation probe", ["localhost"])
    _wait(
        "every node refusing the old CA",
        all_nodes(
            lambda n: accepts_client_certificate(cluster.host, n.port, bundle, probe_old) is False
        ),
        timeout,
    )
    say(f"3/3 the old CA is retired; {bundle} holds the new CA only")
    return new


def _write_key(path: Path, key_pem: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key_pem)
    os.replace(tmp, path)
