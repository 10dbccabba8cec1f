"""Certificate issuing: SANs, lifetimes, chain verification, the renewal decision, reloading."""

from __future__ import annotations

import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from storage_node import tls

NOW = datetime.datetime(2030, 1, 1, 12, 0, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
NAMES = ["demo-0.demo-nodes.ns.svc.cluster.local", "demo.ns.svc", "localhost"]


@pytest.fixture(scope="module")
def ca():
    return tls.new_ca("test CA", NOW - DAY)


def verify_for(cert_pem, ca_pem, name, when=NOW):
    """Verify as a TLS client would: chain to the CA, the name in SAN, at time ``when``."""
    store = Store([x509.load_pem_x509_certificate(ca_pem)])
    verifier = PolicyBuilder().store(store).time(when).build_server_verifier(x509.DNSName(name))
    return verifier.verify(x509.load_pem_x509_certificate(cert_pem), [])


def test_ca_is_a_constrained_ca(ca):
    info = tls.cert_info(ca.cert_pem)
    assert info.is_ca and info.subject_cn == info.issuer_cn == "test CA"
    bc = ca.cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.path_length == 0
    assert tls.key_matches(ca.cert_pem, ca.key_pem)


def test_node_cert_has_every_name_and_verifies_for_each(ca):
    pair = tls.issue_cert(ca, "demo-0", NAMES, ["127.0.0.1"], NOW, 30 * DAY)
    info = tls.cert_info(pair.cert_pem)
    assert set(info.dns_names) == set(NAMES) and info.ip_addresses == ("127.0.0.1",)
    assert not info.is_ca and info.issuer_cn == "test CA"
    assert info.not_after == NOW + 30 * DAY
    assert info.not_before <= NOW
    for name in NAMES:
        chain = verify_for(pair.cert_pem, ca.cert_pem, name)
        assert len(chain) == 2, name
    with pytest.raises(VerificationError):
        verify_for(pair.cert_pem, ca.cert_pem, "demo-1.demo-nodes.ns.svc.cluster.local")
    with pytest.raises(VerificationError):
        verify_for(pair.cert_pem, ca.cert_pem, NAMES[0], NOW + 31 * DAY)  # expired
    eku = pair.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in eku


def test_lifetime_is_capped_by_the_ca(ca):
    pair = tls.issue_cert(ca, "long", ["x"], now=NOW, validity=100000 * DAY)
    assert tls.cert_info(pair.cert_pem).not_after == tls.cert_info(ca.cert_pem).not_after


def test_needs_a_name(ca):
    with pytest.raises(ValueError):
        tls.issue_cert(ca, "nameless", [], now=NOW)


def test_verify_rejects_other_ca_and_expired(ca):
    other = tls.new_ca("other CA", NOW)
    pair = tls.issue_cert(other, "n", ["n"], now=NOW, validity=10 * DAY)
    with pytest.raises(tls.CertificateProblem, match="not issued by CA 'test CA'"):
        tls.verify_issued_by(pair.cert_pem, ca.cert_pem, NOW)
    tls.verify_issued_by(pair.cert_pem, other.cert_pem, NOW)
    with pytest.raises(tls.CertificateProblem, match="expired"):
        tls.verify_issued_by(pair.cert_pem, other.cert_pem, NOW + 11 * DAY)
    with pytest.raises(tls.CertificateProblem, match="cannot read"):
        tls.verify_issued_by(b"garbage", ca.cert_pem, NOW)


def test_renewal_decision(ca):
    pair = tls.issue_cert(ca, "n", NAMES, ["127.0.0.1"], NOW, 90 * DAY)
    due = tls.renewal_due_at(pair.cert_pem)
    start = tls.cert_info(pair.cert_pem).not_before
    assert due == start + (NOW + 90 * DAY - start) * (2 / 3)
    assert tls.renewal_reason(pair, ca.cert_pem, NAMES, ["127.0.0.1"], NOW) is None
    assert tls.renewal_reason(pair, ca.cert_pem, NAMES, ["127.0.0.1"], due - DAY) is None
    assert "renewal due" in tls.renewal_reason(pair, ca.cert_pem, NAMES, ["127.0.0.1"], due)
    assert "expired" in tls.renewal_reason(pair, ca.cert_pem, NAMES, ["127.0.0.1"], NOW + 91 * DAY)
    assert tls.renewal_reason(None, ca.cert_pem, NAMES) == "no certificate yet"
    assert tls.renewal_reason(pair, ca.cert_pem, NAMES[:2], ["127.0.0.1"], NOW) == (
        "its names changed"
    )
    assert tls.renewal_reason(pair, ca.cert_pem, NAMES, [], NOW) == "its names changed"
    other = tls.issue_cert(ca, "n", NAMES, ["127.0.0.1"], NOW, 90 * DAY)
    mixed = tls.CertKey(pair.cert_pem, other.key_pem)
    assert "does not match" in tls.renewal_reason(mixed, ca.cert_pem, NAMES, ["127.0.0.1"], NOW)
    new_ca = tls.new_ca("rotated CA", NOW)
    assert "not issued by" in tls.renewal_reason(pair, new_ca.cert_pem, NAMES, ["127.0.0.1"], NOW)
    custom = tls.renewal_reason(pair, ca.cert_pem, NAMES, ["127.0.0.1"], NOW + 50 * DAY, 0.5)
    assert custom is not None and "renewal due" in custom


def test_reloading_context_follows_files_and_keeps_good_pair(tmp_path):
    ca = tls.new_ca("reload CA")
    first = tls.issue_cert(ca, "a", ["localhost"])
    cert, key = tls.write_pair(tmp_path, "node", first)
    ctx = tls.ReloadingServerContext(str(cert), str(key))
    assert isinstance(ctx.context, ssl.SSLContext)
    assert ctx.serial == first.cert.serial_number
    assert ctx.check() is False  # unchanged
    second = tls.issue_cert(ca, "a", ["localhost"])
    # Only the certificate replaced so far: does not match the old key, keep the old pair.
    cert.write_bytes(second.cert_pem)
    assert ctx.check() is False and ctx.serial == first.cert.serial_number
    key.write_bytes(second.key_pem)
    assert ctx.check() is True and ctx.serial == second.cert.serial_number
    assert ctx.reloads == 1
    key.unlink()
    assert ctx.check() is False and ctx.serial == second.cert.serial_number


def test_write_pair_modes(tmp_path):
    ca = tls.new_ca("modes")
    cert, key = tls.write_pair(tmp_path / "d", "ca", ca)
    assert key.stat().st_mode & 0o777 == 0o600
    assert tls.read_pair(tmp_path / "d", "ca") == ca
    assert tls.read_pair(tmp_path / "d", "missing") is None
