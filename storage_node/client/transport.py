"""Blocking HTTP/1.1 transport: one keep-alive connection per (thread, node), TCP_NODELAY.

Built on the standard library's ``http.client`` rather than requests: a key lookup spent
about 0.4 ms of its 0.8 ms round trip inside requests and urllib3 (measured with
pyinstrument, docs/NODE_API.md), while ``http.client`` adds about 50 µs to a bare socket.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from urllib.parse import urlencode, urlsplit

from storage_node.client.common import TlsError, auth_headers
from storage_node.client.steps import Call, answer_of
from storage_node.errors import Unavailable
from storage_node.mtls import PeerIdentity

# a reused keep-alive connection the node closed meanwhile fails like this before any answer;
# over TLS as an EOF (a pod shutting down): the connection ended, TLS itself did not fail
_STALE = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
)


def _no_delay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Http(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _no_delay(self.sock)


class _Https(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _no_delay(self.sock)


def serves_tls(address: str) -> bool:
    """Whether ``address`` (http://host:port) completes a TLS handshake: asked once a plain
    HTTP request was cut off, to say that the node wants HTTPS."""
    parts = urlsplit(address)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((parts.hostname or "localhost", parts.port or 80), 2) as s:
            with ctx.wrap_socket(s):
                return True
    except OSError:
        return False


def tls_hint(exc: ssl.SSLError) -> str:
    """What to do about a failed handshake, for the two common causes."""
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return (
            "; the node's certificate does not verify: give the cluster's CA with --ca FILE "
            "or MSGSTORE_CA (a 'msgstore local up --tls' cluster's is DIR/tls/ca.crt)"
        )
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text:
        return "; the node does not serve HTTPS: use its http:// address"
    return ""


class HttpTransport:
    """Sends ``Call``s; raises the node's typed error, Unavailable when it cannot be reached,
    TlsError when the TLS handshake fails."""

    def __init__(self, timeout: float, ca: str | None, token: str | None) -> None:
        self.timeout = timeout
        # the CA bundle is read again when it changes (a CA rotation): new connections
        # verify with the CAs the file holds now
        self._ssl: PeerIdentity | None = None
        self._ca = ca
        self._headers = {"Connection": "keep-alive", **auth_headers(token)}
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self, address: str) -> tuple[http.client.HTTPConnection, bool]:
        conns: dict[str, http.client.HTTPConnection] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        conn = conns.get(address)
        if conn is not None:
            return conn, True
        parts = urlsplit(address)
        host = parts.hostname or "localhost"
        if parts.scheme == "https":
            if self._ssl is None:
                self._ssl = PeerIdentity(self._ca or "")
            conn = _Https(
                host, parts.port or 443, timeout=self.timeout, context=self._ssl.context()
            )
        else:
            conn = _Http(host, parts.port or 80, timeout=self.timeout)
        conns[address] = conn
        with self._lock:
            self._all.append(conn)
        return conn, False

    def _drop(self, address: str) -> None:
        conn = self._local.conns.pop(address, None)
        if conn is not None:
            conn.close()

    def send(self, call: Call) -> object:
        body, headers = call.body_and_headers()
        query = call.query()
        target = call.path + ("?" + urlencode(query) if query else "")
        headers = {**self._headers, **headers}
        for attempt in (0, 1):
            conn, reused = self._connection(call.address)
            try:
                conn.request(call.method, target, body=body, headers=headers)
                resp = conn.getresponse()
                content = resp.read()
                if resp.will_close:
                    self._drop(call.address)
                return answer_of(call, resp.status, resp.getheaders(), content)
            except _STALE as exc:  # before SSLError: a TLS EOF is one of these
                self._drop(call.address)
                if reused and attempt == 0:
                    continue  # the node closed an idle connection: one fresh try
                if call.address.startswith("http://") and serves_tls(call.address):
                    raise TlsError(
                        f"{call.address} closed the connection: this node serves HTTPS; use "
                        f"{'https://' + call.address.removeprefix('http://')} and the "
                        "cluster's CA (--ca or MSGSTORE_CA)",
                        address=call.address,
                    ) from None
                raise Unavailable(
                    f"cannot reach {call.address}: {exc}", address=call.address
                ) from None
            except ssl.SSLError as exc:
                self._drop(call.address)
                raise TlsError(
                    f"TLS with {call.address} failed: {exc}{tls_hint(exc)}",
                    address=call.address,
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop(call.address)
                refused = {"sent": False} if isinstance(exc, ConnectionRefusedError) else {}
                raise Unavailable(
                    f"cannot reach {call.address}: {exc}", address=call.address, **refused
                ) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
