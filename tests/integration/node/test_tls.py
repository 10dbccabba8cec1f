"""HTTPS on the node API with real node processes on loopback: verification by the clients
and the CLI, tokens over TLS only, node-to-node calls, and certificate rotation under load."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from cryptography import x509

from storage_node import tls
from storage_node.cli.local import LocalCluster
from storage_node.client import AsyncClient, Client, TlsError, Unauthenticated
from storage_node.errors import Unavailable
from tests.integration.node.conftest import NodeProcess
from tests.waiting import wait_node_ready

TOKEN = "tls-test-token"
NAMES = ["localhost"]
IPS = ["127.0.0.1"]


class TlsNode(NodeProcess):
    """A node serving HTTPS with a certificate from ``ca`` (files in its data dir)."""

    def __init__(self, data_dir: Path, ca: tls.CertKey, env: dict[str, str] | None = None):
        self.tls_dir = data_dir / "tls"
        self.ca_file = str(tls.write_pair(self.tls_dir, "ca", ca)[0])
        self.cert_file, self.key_file = (
            str(p)
            for p in tls.write_pair(self.tls_dir, "node", tls.issue_cert(ca, "n", NAMES, IPS))
        )
        super().__init__(
            data_dir,
            {
                "MSGSTORE_TLS_CERT": self.cert_file,
                "MSGSTORE_TLS_KEY": self.key_file,
                "MSGSTORE_TLS_RELOAD_S": "0.2",
                **(env or {}),
            },
        )
        self.address = f"https://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 180.0) -> None:
        assert self.proc is not None
        wait_node_ready(self.proc, self.url("/readyz"), self.log.read_text, timeout, self.ca_file)


@pytest.fixture(scope="module")
def ca():
    return tls.new_ca("node test CA")


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory, ca):
    node = TlsNode(tmp_path_factory.mktemp("tls-node"), ca, {"MSGSTORE_TOKEN": TOKEN})
    node.start()
    yield node
    node.stop()


@pytest.fixture(autouse=True)
def no_ca_env(monkeypatch):
    monkeypatch.delenv("MSGSTORE_CA", raising=False)


def served_serial(node: TlsNode) -> int:
    """Serial of the certificate a new connection to the node gets."""
    ctx = tls.client_context(node.ca_file)
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as conn:
            der = conn.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_client_without_the_ca_is_refused(tls_node):
    with Client(tls_node.address, token=TOKEN, max_retries=2) as client:
        with pytest.raises(TlsError, match="(?i)certificate verify failed") as info:
            client.list_topics()
    assert "self-signed certificate in certificate chain" in info.value.message or (
        "unable to get local issuer" in info.value.message
    ), info.value.message
    other = tls.new_ca("some other CA")
    other_file = tls.write_pair(tls_node.data_dir / "other", "ca", other)[0]
    with Client(tls_node.address, token=TOKEN, ca=str(other_file)) as client:
        with pytest.raises(TlsError, match="(?i)certificate verify failed"):
            client.list_topics()


def test_client_with_the_ca_and_token_works(tls_node):
    with Client(tls_node.address, token=TOKEN, ca=tls_node.ca_file) as client:
        client.create_topic("tls-ok", partitions=2)
        results = client.produce("tls-ok", [{"key": f"k{i}", "value": f"v{i}"} for i in range(50)])
        assert len(results) == 50
        got = client.lookup_key("tls-ok", "k7")
        assert [m["value"] for m in got["messages"]] == ["v7"], got
    with Client(tls_node.address, ca=tls_node.ca_file) as client:  # TLS fine, token missing
        with pytest.raises(Unauthenticated):
            client.list_topics()


def test_answers_of_megabytes_come_whole_over_tls(tls_node):
    """A binary answer larger than one of the pieces the node writes it in (1 MiB) goes
    through TLS whole: every message once, in order."""
    with Client(tls_node.address, token=TOKEN, ca=tls_node.ca_file) as client:
        client.create_topic("tls-large", partitions=1)
        for b in range(4):
            batch = [{"key": f"k{b}-{i}", "value": "v" * 300} for i in range(5000)]
            client.produce("tls-large", batch)
        with client.consumer("tls-large", page=10_000) as consumer:
            pages = list(consumer)
    assert max(len(p) for p in pages) == 10_000  # about 3.5 MB in one answer
    offsets = [int(o) for p in pages for o in p.offsets]
    assert offsets == list(range(20_000))


def test_a_tls_connection_the_server_drops_is_unavailable_not_a_tls_error(tmp_path, ca):
    """A node going away (a pod shutting down) closes connections before their TLS
    handshake ends: an EOF. That is a node out of reach, which the client retries (a produce
    resends the same batch), not a TLS failure, which it does not: a rolling restart on
    Kubernetes once made a producer give up with "EOF occurred in violation of protocol"."""
    ca_file = tls.write_pair(tmp_path, "ca", ca)[0]
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    served: list[int] = []

    def serve() -> None:  # a node going away: takes connections and closes them at once
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            served.append(1)
            conn.close()  # the client's TLS handshake meets an EOF

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        address = f"https://127.0.0.1:{port}"
        with Client(address, ca=str(ca_file), max_retries=2, timeout=10) as client:
            with pytest.raises(Unavailable):
                client.list_topics()
        assert len(served) >= 2  # it was tried again
    finally:
        listener.close()
        thread.join(5)


def test_ca_from_the_environment_and_bare_host_gets_https(tls_node, monkeypatch):
    monkeypatch.setenv("MSGSTORE_CA", tls_node.ca_file)
    with Client(f"127.0.0.1:{tls_node.port}", token=TOKEN) as client:
        assert client.endpoints == [tls_node.address]
        assert isinstance(client.list_topics(), list)


def test_missing_ca_file_is_a_clear_error(tls_node, tmp_path):
    from storage_node.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="does not exist"):
        Client(tls_node.address, ca=str(tmp_path / "nope.crt"))


def test_with_a_ca_the_token_never_goes_over_plain_http(tls_node):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        with Client(f"http://127.0.0.1:{port}", token=TOKEN, ca=tls_node.ca_file) as client:
            with pytest.raises(TlsError, match="refusing to send"):
                client.list_topics()
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected: nothing was sent
    finally:
        listener.close()


def test_plain_http_to_the_tls_port_gets_no_answer(tls_node):
    with pytest.raises(requests.RequestException):
        requests.get(f"http://127.0.0.1:{tls_node.port}/v1/topics", timeout=5)


def test_async_client_verifies_too(tls_node):
    async def scenario():
        async with AsyncClient(tls_node.address, token=TOKEN, max_retries=2) as client:
            with pytest.raises(TlsError, match="(?i)certificate verify failed"):
                await client.list_topics()
        async with AsyncClient(tls_node.address, token=TOKEN, ca=tls_node.ca_file) as client:
            await client.create_topic("tls-async", partitions=1)
            results = await client.produce("tls-async", [b"a", b"b"])
            assert [r["offset"] for r in results] == [0, 1]

    asyncio.run(scenario())


def run_cli(*args, env=None):
    full_env = {k: v for k, v in os.environ.items() if k not in ("MSGSTORE_CA", "MSGSTORE_TOKEN")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "storage_node.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


def test_cli_ca_option_and_env(tls_node):
    base = ["topic", "list", "--endpoint", tls_node.address, "--token", TOKEN]
    refused = run_cli(*base)
    assert refused.returncode == 1, refused
    assert "tls_error" in refused.stderr and "certificate verify failed" in refused.stderr.lower()
    ok = run_cli(*base, "--ca", tls_node.ca_file)
    assert ok.returncode == 0, ok.stderr
    via_env = run_cli(*base, env={"MSGSTORE_CA": tls_node.ca_file})
    assert via_env.returncode == 0, via_env.stderr


def test_serve_refuses_half_a_tls_config(tmp_path):
    out = run_cli("serve", "--data-dir", str(tmp_path), "--tls-cert", str(tmp_path / "x.crt"))
    assert out.returncode == 1 and "both a certificate and a key" in out.stderr, out.stderr


def test_local_cluster_with_tls_peers_verify_each_other(tmp_path):
    cluster = LocalCluster(tmp_path / "c")
    cluster.up(
        nodes=2, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0", "MSGSTORE_TOKEN": TOKEN}, tls=True
    )
    try:
        assert cluster.ca_file and all(a.startswith("https://") for a in cluster.addresses)
        with Client(cluster.addresses, token=TOKEN, ca=cluster.ca_file) as client:
            client.create_topic("spread", partitions=4)
            client.produce("spread", [{"key": f"k{i}", "value": str(i)} for i in range(40)])
            # A key lookup on node-0 asks node-1 over HTTPS (verified with the CA) for its part.
            for i in (1, 2, 3, 5, 8):
                found = client.request("GET", cluster.addresses[0], f"/v1/topics/spread/keys/k{i}")
                assert [m["value"] for m in found["messages"]] == [str(i)], found
                assert not found.get("unreachable_nodes"), found
        with Client(cluster.addresses, token=TOKEN, max_retries=1) as client:
            with pytest.raises(TlsError):
                client.list_topics()
    finally:
        cluster.down()
    # A second start keeps the CA (clients' copies stay valid) and reuses good certificates.
    ca_before = Path(cluster.ca_file).read_bytes()
    cluster.up(nodes=2, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0"}, tls=True)
    try:
        assert Path(cluster.ca_file).read_bytes() == ca_before
    finally:
        cluster.down()


def test_certificate_rotation_under_load_loses_no_acknowledged_message(tmp_path, ca):
    node = TlsNode(tmp_path / "rot", ca, {"MSGSTORE_TOKEN": TOKEN})
    node.start()
    try:
        with Client(node.address, token=TOKEN, ca=node.ca_file) as admin:
            admin.create_topic("rot", partitions=3)
        acked: list[dict] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def produce(fresh_clients: bool) -> None:
            client = Client(node.address, token=TOKEN, ca=node.ca_file, producer_id=None)
            n = 0
            try:
                while not stop.is_set():
                    if fresh_clients and n % 5 == 0:  # new connections: new handshakes
                        client.close()
                        client = Client(node.address, token=TOKEN, ca=node.ca_file)
                    batch = [
                        {"key": f"{fresh_clients}-{n}-{j}", "value": f"{n}/{j}"} for j in range(20)
                    ]
                    results = client.produce("rot", batch)
                    acked.extend(
                        {**r, "value": m["value"]} for r, m in zip(results, batch, strict=True)
                    )
                    n += 1
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
            finally:
                client.close()

        threads = [threading.Thread(target=produce, args=(f,)) for f in (True, False)]
        for t in threads:
            t.start()
        serials = [served_serial(node)]
        for _ in range(4):
            new = tls.issue_cert(ca, "n", NAMES, IPS)
            tls.write_pair(node.tls_dir, "node", new)  # cert first, then key: a torn pair
            deadline = time.monotonic() + 60
            while served_serial(node) != new.cert.serial_number:
                assert time.monotonic() < deadline, (
                    f"node never served the new cert\n{node.log.read_text()[-3000:]}"
                )
                time.sleep(0.05)
            serials.append(new.cert.serial_number)
        stop.set()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert len(set(serials)) == 5
        assert len(acked) > 0
        stored = {}
        with Client(node.address, token=TOKEN, ca=node.ca_file) as reader:
            for p in range(3):
                for m in reader.read_all("rot", p):
                    stored[(p, m["offset"])] = m
        missing = [a for a in acked if (a["partition"], a["offset"]) not in stored]
        assert not missing, missing[:5]
        wrong = [a for a in acked if stored[(a["partition"], a["offset"])]["value"] != a["value"]]
        assert not wrong, wrong[:5]
        assert len(stored) == len(acked), "a retried batch was written twice"
        assert "TLS certificate reloaded" in node.log.read_text()
    finally:
        node.stop()
