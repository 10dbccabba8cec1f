"""TLS material for msgstore: a certificate authority, node certificates, SSL contexts.

The operator issues a CA and one certificate per node with these functions, ``msgstore local
--tls`` does the same in a cluster directory, and a node serves HTTPS from a certificate and
key file that it reloads when they change (a renewed certificate takes effect for new
connections without a restart; connections already open keep the certificate they started
with).

Keys are ECDSA P-256 and certificates are signed with SHA-256; node certificates carry the
serverAuth and clientAuth usages and every name a peer may use in Subject Alternative Name.
A certificate's organizational unit says what it identifies: ``NODE_UNIT`` a storage node,
``CONTROLLER_UNIT`` the failover controller (storage_node/mtls.py: who may call the routes
only peers call).

Over 400 lines on purpose: issuing, checking and serving certificates (the reloading server
context) share the same helpers and are used together by nodes, the CLI and the operator.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

# Renew a certificate once this fraction of its lifetime has passed.
DEFAULT_RENEW_FRACTION = 2 / 3
DEFAULT_CA_DAYS = 3650
DEFAULT_NODE_DAYS = 90
# Backdate notBefore a little so a peer whose clock is slightly behind accepts a new cert.
CLOCK_SKEW = datetime.timedelta(minutes=5)
# The subject OU of the certificates that identify the store's own processes.
NODE_UNIT = "msgstore-node"
CONTROLLER_UNIT = "msgstore-controller"


class CertificateProblem(Exception):
    """A certificate does not verify, does not match its key, or cannot be read."""


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True)
class CertInfo:
    subject_cn: str
    issuer_cn: str
    not_before: datetime.datetime
    not_after: datetime.datetime
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    is_ca: bool
    serial: int
    units: tuple[str, ...] = ()  # the subject's organizational units


def _utc(now: datetime.datetime | None) -> datetime.datetime:
    now = now or datetime.datetime.now(datetime.UTC)
    return now if now.tzinfo else now.replace(tzinfo=datetime.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, unit: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "msgstore")]
    if unit:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64]))
    return x509.Name(attrs)


def _certificate(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    now: datetime.datetime,
    not_after: datetime.datetime,
    issuer: CertKey | None,
    extensions: Sequence[x509.ExtensionType] = (),
) -> CertKey:
    """A certificate for ``key``, signed by ``issuer`` (None: a self-signed CA, which signs
    end-entity certificates only, path length 0, and revocation lists; an issued one only
    signs handshakes). Critical basic constraints and key usage, then ``extensions`` and the
    subject and authority key identifiers; valid from ``now - CLOCK_SKEW``."""
    is_ca = issuer is None
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    issuer_name, issuer_ski, signer = subject, ski, key
    if issuer is not None:
        issuer_cert = issuer.cert
        issuer_name = issuer_cert.subject
        issuer_ski = issuer_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        signer = _ec_key(issuer.key_pem)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(
            x509.BasicConstraints(ca=is_ca, path_length=0 if is_ca else None), critical=True
        )
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    for extension in [*extensions, ski]:
        builder = builder.add_extension(extension, critical=False)
    builder = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_ski), critical=False
    )
    cert = builder.sign(signer, hashes.SHA256())
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _ec_key(key_pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateProblem("the CA key is not an EC key")
    return key


def new_ca(
    common_name: str,
    now: datetime.datetime | None = None,
    validity: datetime.timedelta = datetime.timedelta(days=DEFAULT_CA_DAYS),
) -> CertKey:
    """A self-signed CA that may sign end-entity certificates only (path length 0)."""
    now = _utc(now)
    return _certificate(_name(common_name), _new_key(), now, now + validity, None)


def _sans(dns_names: Sequence[str], ip_addresses: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(dns_names)]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in dict.fromkeys(ip_addresses)]
    return names


def issue_cert(
    ca: CertKey,
    common_name: str,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    now: datetime.datetime | None = None,
    validity: datetime.timedelta = datetime.timedelta(days=DEFAULT_NODE_DAYS),
    unit: str | None = None,
) -> CertKey:
    """A server (and client) certificate for the given names, signed by ``ca``; ``unit``
    (``NODE_UNIT``, ``CONTROLLER_UNIT``) makes it one of the store's own processes.

    Its lifetime never extends past the CA's own expiry.
    """
    if not dns_names and not ip_addresses:
        raise ValueError("a certificate needs at least one DNS name or IP address")
    now = _utc(now)
    ca_cert = ca.cert
    not_after = min(now + validity, ca_cert.not_valid_after_utc)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    extensions = [
        x509.ExtendedKeyUsage(usages),
        x509.SubjectAlternativeName(_sans(dns_names, ip_addresses)),
    ]
    return _certificate(_name(common_name, unit), _new_key(), now, not_after, ca, extensions)


def issue_client_cert(
    ca: CertKey,
    common_name: str,
    now: datetime.datetime | None = None,
    validity: datetime.timedelta = datetime.timedelta(days=DEFAULT_NODE_DAYS),
) -> CertKey:
    """A client certificate of a user: subject ``CN=<common_name>`` alone (what the access
    document's ``tls_subject`` names), clientAuth only, no names to serve."""
    if not common_name or len(common_name) > 64:
        raise ValueError("a client certificate's common name must be 1-64 characters")
    now = _utc(now)
    not_after = min(now + validity, ca.cert.not_valid_after_utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    usages = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    return _certificate(subject, _new_key(), now, not_after, ca, [usages])


def _cn(name: x509.Name) -> str:
    attrs = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if attrs else ""


def cert_info(cert_pem: bytes) -> CertInfo:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise CertificateProblem(f"not a PEM certificate: {exc}") from exc
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = tuple(san.get_values_for_type(x509.DNSName))
        ips = tuple(str(a) for a in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        dns, ips = (), ()
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    return CertInfo(
        subject_cn=_cn(cert.subject),
        issuer_cn=_cn(cert.issuer),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        dns_names=dns,
        ip_addresses=ips,
        is_ca=is_ca,
        serial=cert.serial_number,
        units=tuple(
            str(a.value)
            for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
        ),
    )


def verify_issued_by(cert_pem: bytes, ca_pem: bytes, now: datetime.datetime | None = None) -> None:
    """Raise CertificateProblem unless ``cert_pem`` is signed by the CA and valid at ``now``."""
    now = _utc(now)
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        ca = x509.load_pem_x509_certificate(ca_pem)
    except ValueError as exc:
        raise CertificateProblem(f"cannot read a certificate: {exc}") from exc
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise CertificateProblem(f"not issued by CA {_cn(ca.subject)!r}: {exc}") from exc
    if now < cert.not_valid_before_utc:
        raise CertificateProblem(f"not valid before {cert.not_valid_before_utc.isoformat()}")
    if now >= cert.not_valid_after_utc:
        raise CertificateProblem(f"expired at {cert.not_valid_after_utc.isoformat()}")


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return cert.public_key().public_bytes(*spki) == key.public_key().public_bytes(*spki)


def renewal_due_at(cert_pem: bytes, fraction: float = DEFAULT_RENEW_FRACTION) -> datetime.datetime:
    """When a certificate should be replaced: ``fraction`` of its lifetime after notBefore."""
    info = cert_info(cert_pem)
    return info.not_before + (info.not_after - info.not_before) * fraction


def renewal_reason(
    current: CertKey | None,
    ca_pem: bytes,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    now: datetime.datetime | None = None,
    fraction: float = DEFAULT_RENEW_FRACTION,
    unit: str | None = None,
) -> str | None:
    """Why ``current`` must be (re)issued, or None while it is good.

    Reasons: missing, unreadable, key mismatch, another issuer, expired, names changed, not
    of ``unit`` (a certificate issued before nodes had one), or past ``fraction`` of its
    lifetime.
    """
    now = _utc(now)
    if current is None or not current.cert_pem or not current.key_pem:
        return "no certificate yet"
    try:
        verify_issued_by(current.cert_pem, ca_pem, now)
    except CertificateProblem as exc:
        return str(exc)
    if not key_matches(current.cert_pem, current.key_pem):
        return "the key does not match the certificate"
    info = cert_info(current.cert_pem)
    if set(info.dns_names) != set(dns_names) or set(info.ip_addresses) != {
        str(ipaddress.ip_address(a)) for a in ip_addresses
    }:
        return "its names changed"
    if unit and unit not in info.units:
        return f"it does not name a {unit} (OU)"
    due = renewal_due_at(current.cert_pem, fraction)
    if now >= due:
        return f"renewal due since {due.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    return None


# -- SSL contexts ----------------------------------------------------------------------------
def client_context(ca_file: str | os.PathLike[str] | None) -> ssl.SSLContext:
    """Verifies servers against ``ca_file`` (the system's trust store when None)."""
    ctx = ssl.create_default_context(cafile=os.fspath(ca_file) if ca_file else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def _server_context(cert_file: str, key_file: str, ca_file: str = "") -> ssl.SSLContext:
    """With ``ca_file`` the server asks for a client certificate (optional: clients with
    tokens need none) and refuses the handshake of one no CA of the bundle issued."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    if ca_file:
        ctx.load_verify_locations(ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def peer_subject(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The RFC 4514 subject of the client certificate a server-side TLS handshake verified
    (a server asks for one only with a CA bundle: ``_server_context``), or None."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def read_bundle(pem: bytes) -> list[x509.Certificate]:
    """The CA certificates of a PEM bundle (one CA, or several while a CA is rotated)."""
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateProblem(f"not a PEM bundle of CA certificates: {exc}") from exc
    return certs


class ReloadingServerContext:
    """A server SSLContext whose certificate and trusted CAs follow the files on disk.

    ``context`` is handed to the listener once; each new handshake is switched (through the
    SNI callback, which OpenSSL calls for every ClientHello) to the context built from the
    newest good files (the switched context's trust store verifies the client's
    certificate). ``check()`` rebuilds that context when the files' bytes changed and keeps
    the previous one when the new pair is incomplete or does not match, or the CA bundle
    does not read (a Secret volume or an operator replacing the files mid-way), so a bad or
    half-written file never interrupts service. With ``ca_file`` clients may present a
    certificate (``trusted`` holds the CAs it is checked against).
    """

    def __init__(self, cert_file: str, key_file: str, ca_file: str = "") -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.ca_file = ca_file
        self._loaded = self._read()
        self.trusted = read_bundle(self._loaded[2]) if ca_file else []
        self._current = _server_context(cert_file, key_file, ca_file)
        self.context = _server_context(cert_file, key_file, ca_file)
        self.context.sni_callback = self._pick
        self.reloads = 0
        self.trust_reloads = 0

    def _read(self) -> tuple[bytes, bytes, bytes]:
        ca = Path(self.ca_file).read_bytes() if self.ca_file else b""
        return Path(self.cert_file).read_bytes(), Path(self.key_file).read_bytes(), ca

    def _pick(self, sslobj: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        current = self._current
        if current is not ctx:
            sslobj.context = current

    @property
    def serial(self) -> int:
        """Serial number of the certificate new connections get."""
        return cert_info(self._loaded[0]).serial

    def check(self) -> bool:
        """Reload when the files changed; True when a new certificate or CA bundle is now in
        use."""
        try:
            files = self._read()
        except OSError as exc:
            log.warning("cannot read the TLS files: %s", exc)
            return False
        if files == self._loaded:
            return False
        if not key_matches(files[0], files[1]):
            log.warning(
                "TLS files changed but key and certificate do not match yet; keeping the old"
            )
            return False
        try:
            trusted = read_bundle(files[2]) if self.ca_file else []
            ctx = _server_context(self.cert_file, self.key_file, self.ca_file)
            if self._read() != files:  # changed again while loading: take it next time
                return False
        except (OSError, ssl.SSLError, CertificateProblem) as exc:
            log.warning("cannot load the new TLS files (keeping the old): %s", exc)
            return False
        pair_changed, trust_changed = files[:2] != self._loaded[:2], files[2] != self._loaded[2]
        self._current = ctx
        self._loaded = files
        self.trusted = trusted
        if pair_changed:
            self.reloads += 1
            log.info("TLS certificate reloaded (serial %x)", cert_info(files[0]).serial)
        if trust_changed:
            self.trust_reloads += 1
            log.info("trusted CA bundle reloaded: %s", ", ".join(_cn(c.subject) for c in trusted))
        return True


# -- files for a local cluster --------------------------------------------------------------
def write_pair(directory: Path, stem: str, pair: CertKey) -> tuple[Path, Path]:
    """Write ``stem.crt`` and ``stem.key`` (0600), each replaced atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = (directory / f"{stem}.crt", directory / f"{stem}.key")
    for path, data in zip(paths, (pair.cert_pem, pair.key_pem), strict=True):
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    return paths


def read_pair(directory: Path, stem: str) -> CertKey | None:
    try:
        return CertKey(
            (directory / f"{stem}.crt").read_bytes(), (directory / f"{stem}.key").read_bytes()
        )
    except FileNotFoundError:
        return None
