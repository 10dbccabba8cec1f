"""Mutual TLS between the store's own processes: which client certificate identifies a
peer (a node or the failover controller), and the certificate this process presents when it
calls a node.

A peer is a client certificate issued directly by a CA of the node's trusted bundle
(``MSGSTORE_TLS_CA``), valid now, with the clientAuth usage and a subject organizational
unit (OU) of ``tls.NODE_UNIT`` or ``tls.CONTROLLER_UNIT``. The handshake already refuses a
certificate no CA of the bundle issued; ``PeerCheck`` checks again at every request against
the bundle loaded now, so a connection opened before a CA was retired is refused too.

``PeerIdentity`` holds the client side: one SSL context (the CA bundle servers are verified
with, this process's certificate and key) rebuilt when the files change, for the node's
aiohttp peer session and for the ``requests`` sessions of log shipping and the controller.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from storage_node import tls

if TYPE_CHECKING:
    import requests

log = logging.getLogger(__name__)
PEER_UNITS = (tls.NODE_UNIT, tls.CONTROLLER_UNIT)
_CACHE_LIMIT = 256


def _issued_by_one_of(cert: x509.Certificate, trusted: Sequence[x509.Certificate]) -> bool:
    for ca in trusted:
        if ca.subject != cert.issuer:
            continue
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


class PeerCheck:
    """Whether a request's client certificate is one of the store's processes; the
    signature checks are remembered per certificate and trust bundle."""

    def __init__(self) -> None:
        self._issued: dict[tuple[bytes, int], bool] = {}

    def refusal(
        self,
        der: bytes | None,
        trusted: Sequence[x509.Certificate],
        trust_version: int,
        now: datetime.datetime | None = None,
    ) -> str | None:
        """Why ``der`` (the client's certificate, DER) is no peer; None when it is one."""
        if not der:
            return "no client certificate was presented"
        try:
            cert = x509.load_der_x509_certificate(der)
        except ValueError:
            return "the client certificate does not read"
        key = (hashlib.sha256(der).digest(), trust_version)
        issued = self._issued.get(key)
        if issued is None:
            issued = _issued_by_one_of(cert, trusted)
            if len(self._issued) >= _CACHE_LIMIT:
                self._issued.clear()
            self._issued[key] = issued
        if not issued:
            return "the client certificate is not issued by a CA this node trusts"
        now = now or datetime.datetime.now(datetime.UTC)
        if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
            return "the client certificate is not valid now"
        try:
            usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        except x509.ExtensionNotFound:
            return "the client certificate has no extended key usage"
        if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
            return "the client certificate lacks the clientAuth usage"
        units = {
            str(a.value)
            for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
        }
        if not units & set(PEER_UNITS):
            return f"the client certificate names no {' or '.join(PEER_UNITS)} (OU)"
        return None


class PeerIdentity:
    """The TLS side of this process's calls to nodes: the CA bundle they are verified with
    (the system's when ``ca_file`` is empty) and the certificate and key presented when a
    node asks for one. ``context()`` rebuilds the SSL context as soon as the files changed
    (a stat per call; the files are read only then) and keeps the last good one while a pair
    is half written or a bundle does not read; new connections take the new context."""

    def __init__(self, ca_file: str = "", cert_file: str = "", key_file: str = "") -> None:
        self.ca_file = ca_file
        self.cert_file = cert_file
        self.key_file = key_file
        self._lock = threading.Lock()
        self._seen = self._stat()
        self._loaded = self._read()
        self._context = self._build()
        self.reloads = 0

    @property
    def _paths(self) -> tuple[str, ...]:
        return tuple(p for p in (self.ca_file, self.cert_file, self.key_file) if p)

    def _stat(self) -> tuple[tuple[int, int, int] | None, ...]:
        found: list[tuple[int, int, int] | None] = []
        for path in self._paths:
            try:
                st = os.stat(path)
            except OSError:
                found.append(None)
                continue
            found.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(found)

    def _read(self) -> tuple[bytes, ...]:
        return tuple(Path(p).read_bytes() for p in self._paths)

    def _build(self) -> ssl.SSLContext:
        ctx = tls.client_context(self.ca_file or None)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def context(self) -> ssl.SSLContext:
        if self._stat() != self._seen:
            self.check()
        return self._context

    def check(self) -> bool:
        """Rebuild the context when the files changed; True when a new one is in use."""
        with self._lock:
            self._seen = self._stat()
            try:
                files = self._read()
                if files == self._loaded:
                    return False
                if self.cert_file and not tls.key_matches(files[-2], files[-1]):
                    return False  # half written: the key's change triggers the next check
                ctx = self._build()
                if self._read() != files:
                    return False
            except (OSError, ssl.SSLError) as exc:
                log.warning("cannot load the new peer TLS files (keeping the old): %s", exc)
                return False
            self._context = ctx
            self._loaded = files
            self.reloads += 1
            log.info("TLS files for calls to nodes reloaded (certificate, trusted CAs)")
            return True

    def session(self) -> requests.Session:
        """A ``requests`` session whose https connections use this identity."""
        import requests
        from requests.adapters import HTTPAdapter

        identity = self

        class IdentityAdapter(HTTPAdapter):
            """Connections use the identity's current SSL context (requests' own ``verify``
            and ``cert`` are not consulted: the context holds both)."""

            def build_connection_pool_key_attributes(
                self, request: requests.PreparedRequest, verify: Any, cert: Any = None
            ) -> tuple[dict[str, Any], dict[str, Any]]:
                host, _ = super().build_connection_pool_key_attributes(request, verify, cert)
                return host, {"ssl_context": identity.context()}

            def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
                """Nothing to set on the pool: the SSL context verifies and presents."""

        session = requests.Session()
        session.mount("https://", IdentityAdapter())
        return session


# -- probes: what a node trusts and serves now (a CA rotation waits on them) ---------------
def accepts_client_certificate(
    host: str,
    port: int,
    ca_file: str | os.PathLike[str],
    probe: tls.CertKey,
    server_name: str = "localhost",
) -> bool | None:
    """Whether the node at host:port completes a request over a connection presenting
    ``probe``: True when it answers, False when it ends the connection unanswered (it does
    not trust the probe's CA), None when it cannot be reached."""
    with tempfile.TemporaryDirectory(prefix="msgstore-probe-") as tmp:
        cert_file, key_file = tls.write_pair(Path(tmp), "probe", probe)
        ctx = tls.client_context(ca_file)
        ctx.load_cert_chain(cert_file, key_file)
    request = f"GET /healthz HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n"
    try:
        raw = socket.create_connection((host, port), timeout=5)
    except OSError:
        return None
    try:
        with raw, ctx.wrap_socket(raw, server_hostname=server_name) as conn:
            conn.sendall(request.encode())
            return conn.recv(16).startswith(b"HTTP/")
    except (ssl.SSLError, OSError):
        return False


def served_issuer(
    host: str, port: int, ca_file: str | os.PathLike[str], server_name: str = "localhost"
) -> x509.Name | None:
    """The issuer of the certificate a new connection to host:port gets (None: no answer)."""
    ctx = tls.client_context(ca_file)
    try:
        with socket.create_connection((host, port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=server_name) as conn:
                der = conn.getpeercert(binary_form=True)
    except OSError:
        return None
    return x509.load_der_x509_certificate(der).issuer if der else None
