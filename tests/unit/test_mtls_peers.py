"""mTLS between nodes, in one process over loopback sockets: which client certificate is a
peer (storage_node/mtls.py), a server context whose trusted CAs follow the bundle file, a
client identity that follows its files, and the local cluster's CA files."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading

import pytest
from cryptography.hazmat.primitives import serialization

from storage_node import mtls, tls
from storage_node.cli.local_tls import ensure_local_tls, signing_ca, write_bundle
from storage_node.errors import InvalidArgument

NOW = datetime.datetime.now(datetime.UTC)
DAY = datetime.timedelta(days=1)


@pytest.fixture(scope="module")
def ca():
    return tls.new_ca("store CA")


@pytest.fixture(scope="module")
def other_ca():
    return tls.new_ca("another CA")


def der(pair: tls.CertKey) -> bytes:
    return pair.cert.public_bytes(serialization.Encoding.DER)


def test_a_peer_is_a_node_or_controller_certificate_of_a_trusted_ca(ca, other_ca):
    check = mtls.PeerCheck()
    node = tls.issue_cert(ca, "node-0", ["localhost"], unit=tls.NODE_UNIT)
    controller = tls.issue_cert(ca, "controller", ["c"], unit=tls.CONTROLLER_UNIT)
    assert check.refusal(der(node), [ca.cert], 0) is None
    assert check.refusal(der(controller), [other_ca.cert, ca.cert], 0) is None
    refused = {
        "none": check.refusal(None, [ca.cert], 0),
        "user of the CA": check.refusal(der(tls.issue_cert(ca, "alice", ["a"])), [ca.cert], 0),
        "other unit": check.refusal(
            der(tls.issue_cert(ca, "x", ["x"], unit="team-a")), [ca.cert], 0
        ),
        "node of another CA": check.refusal(
            der(tls.issue_cert(other_ca, "node-0", ["localhost"], unit=tls.NODE_UNIT)),
            [ca.cert],
            0,
        ),
        "expired": check.refusal(
            der(
                tls.issue_cert(ca, "n", ["n"], now=NOW - 10 * DAY, validity=DAY, unit=tls.NODE_UNIT)
            ),
            [ca.cert],
            0,
        ),
        "garbage": check.refusal(b"not a certificate", [ca.cert], 0),
    }
    assert all(refused.values()), refused
    assert "OU" in refused["user of the CA"] and "OU" in refused["other unit"]
    assert "not issued" in refused["node of another CA"]
    assert "not valid now" in refused["expired"]


def test_a_retired_ca_is_refused_with_the_next_bundle_version(ca, other_ca):
    check = mtls.PeerCheck()
    node = tls.issue_cert(ca, "node-0", ["localhost"], unit=tls.NODE_UNIT)
    assert check.refusal(der(node), [ca.cert, other_ca.cert], 1) is None
    assert check.refusal(der(node), [other_ca.cert], 2) is not None


def test_renewal_reissues_a_node_certificate_without_the_unit(ca):
    plain = tls.issue_cert(ca, "node-0", ["localhost"])
    assert tls.renewal_reason(plain, ca.cert_pem, ["localhost"]) is None
    why = tls.renewal_reason(plain, ca.cert_pem, ["localhost"], unit=tls.NODE_UNIT)
    assert why and tls.NODE_UNIT in why
    node = tls.issue_cert(ca, "node-0", ["localhost"], unit=tls.NODE_UNIT)
    assert tls.cert_info(node.cert_pem).units == (tls.NODE_UNIT,)
    assert tls.renewal_reason(node, ca.cert_pem, ["localhost"], unit=tls.NODE_UNIT) is None


def serve_once(ctx: ssl.SSLContext) -> tuple[int, list[object]]:
    """A TLS server on loopback answering each connection with the DER of the client's
    certificate length (b'none' without one); returns its port and a list of outcomes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    outcomes: list[object] = []

    def run() -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with ctx.wrap_socket(raw, server_side=True) as conn:
                    peer = conn.getpeercert(binary_form=True)
                    conn.recv(1)
                    conn.sendall(b"peer" if peer else b"none")
                    outcomes.append(peer)
            except (ssl.SSLError, OSError) as exc:
                outcomes.append(exc)

    threading.Thread(target=run, daemon=True).start()
    outcomes.append(listener)
    return listener.getsockname()[1], outcomes


def talk(port: int, ctx: ssl.SSLContext) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as conn:
            conn.sendall(b"x")
            return conn.recv(4)


def test_server_trust_follows_the_bundle_and_clients_follow_their_files(tmp_path, ca, other_ca):
    d = tmp_path
    server_cert, server_key = tls.write_pair(d, "server", tls.issue_cert(ca, "s", ["localhost"]))
    write_bundle(d, [ca.cert_pem])
    reloading = tls.ReloadingServerContext(str(server_cert), str(server_key), str(d / "ca.crt"))
    port, outcomes = serve_once(reloading.context)
    try:
        # the client trusts both CAs and presents a certificate of the other CA
        (d / "both.crt").write_bytes(ca.cert_pem + other_ca.cert_pem)
        tls.write_pair(d, "client", tls.issue_cert(other_ca, "n", ["n"], unit=tls.NODE_UNIT))
        ident = mtls.PeerIdentity(str(d / "both.crt"), str(d / "client.crt"), str(d / "client.key"))
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            talk(port, ident.context())  # the server does not trust the other CA yet
        assert talk(port, tls.client_context(d / "ca.crt")) == b"none"  # no certificate: fine
        write_bundle(d, [ca.cert_pem, other_ca.cert_pem])
        assert reloading.check() and reloading.trust_reloads == 1
        assert [c.subject for c in reloading.trusted] == [ca.cert.subject, other_ca.cert.subject]
        assert talk(port, ident.context()) == b"peer"
        # a half-written client pair is not taken; the whole pair is
        new = tls.issue_cert(ca, "n2", ["n"], unit=tls.NODE_UNIT)
        (d / "client.crt").write_bytes(new.cert_pem)
        before = ident.context()
        assert ident.reloads == 0 and before is ident.context()
        (d / "client.key").write_bytes(new.key_pem)
        assert ident.context() is not before and ident.reloads == 1
        assert talk(port, ident.context()) == b"peer"
        # a bundle that does not read keeps the trusted CAs
        (d / "ca.crt").write_bytes(b"garbage")
        assert not reloading.check() and len(reloading.trusted) == 2
    finally:
        outcomes[0].close()  # type: ignore[attr-defined]


def test_local_ca_files(tmp_path):
    d = tmp_path / "tls"
    ca_file = ensure_local_tls(d, ["node-0", "node-1"], "127.0.0.1")
    ca = signing_ca(d)
    assert ca is not None and ca_file.read_bytes() == ca.cert_pem
    for stem, unit in (("node-0", tls.NODE_UNIT), ("controller", tls.CONTROLLER_UNIT)):
        pair = tls.read_pair(d, stem)
        assert pair is not None and tls.cert_info(pair.cert_pem).units == (unit,)
        tls.verify_issued_by(pair.cert_pem, ca.cert_pem)
    other = tls.new_ca("x")
    write_bundle(d, [other.cert_pem, ca.cert_pem])  # the signing CA is found in a bundle
    assert signing_ca(d) == ca
    write_bundle(d, [other.cert_pem])
    with pytest.raises(InvalidArgument, match="rotate-ca"):
        signing_ca(d)
