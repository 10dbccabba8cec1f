"""TLS on both sides of the console: it verifies a TLS cluster's nodes with ``--ca`` (and
refuses to start a page without it), and serves HTTPS itself with ``--cert``/``--key``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
import requests
from waiting import wait_until

from storage_node.cli.local import LocalCluster
from storage_node.cli.local_console import LocalConsole
from storage_node.cli.ports import free_port
from storage_node.client import Client
from tests.integration.console.conftest import ORDERS, rows


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("console-tls"))
    c.up(nodes=1, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0"}, tls=True)
    try:
        with Client(c.addresses, ca=c.ca_file) as client:
            client.create_topic(ORDERS, partitions=2)
            client.produce(ORDERS, [{"key": "order-42", "value": '{"order": 42}'}])
        yield c
    finally:
        c.down()


def test_the_console_verifies_a_tls_cluster_with_its_ca(tls_cluster):
    console = LocalConsole(tls_cluster.dir)
    try:
        url = console.start(tls_cluster.addresses, ca=tls_cluster.ca_file).url
        page = requests.get(f"{url}/search?topic={ORDERS}&key=order-42", timeout=30)
        assert page.status_code == 200 and [r[3] for r in rows(page.text)] == ["order-42"]
    finally:
        console.stop()


def test_without_the_ca_the_console_says_the_nodes_do_not_verify(tls_cluster, tmp_path):
    console = LocalConsole(tmp_path)
    try:
        url = console.start(tls_cluster.addresses).url
        page = requests.get(f"{url}/topics", timeout=30, allow_redirects=False)
        # the cluster cannot be asked: no session opens, and no page shows data
        assert page.status_code in (303, 495), page.text[:300]
    finally:
        console.stop()


def test_the_console_serves_https_with_its_own_certificate(tls_cluster):
    tls = tls_cluster.dir / "tls"
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "storage_node.cli", "console",
            "--endpoint", tls_cluster.addresses[0], "--ca", str(tls / "ca.crt"),
            "--port", str(port), "--cert", str(tls / "node-0.crt"), "--key", str(tls / "node-0.key"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert re.match(rf"console: https://127\.0\.0\.1:{port} ", line), line
        page = wait_until(
            lambda: requests.get(
                f"https://127.0.0.1:{port}/topics", verify=str(tls / "ca.crt"), timeout=10
            ),
            30,
            "the console over HTTPS",
        )
        assert page.status_code == 200 and ORDERS in page.text
        login = requests.get(f"https://127.0.0.1:{port}/login", verify=str(tls / "ca.crt"))
        assert "Secure" in login.headers["Set-Cookie"]  # cookies only over HTTPS
    finally:
        proc.terminate()
        proc.wait(30)


def test_bad_command_lines_are_refused_before_anything_listens(tmp_path):
    cases = [
        ([], "--endpoint"),
        (["--endpoint", "http://127.0.0.1:1", "--cert", "c.pem"], "--cert and --key"),
        (["--endpoint", "http://127.0.0.1:1", "--port", "70000"], "--port"),
        (["--endpoint", "ftp://127.0.0.1:1"], "ftp"),
        (["--endpoint", "http://127.0.0.1:1", "--ca", "missing.pem"], "missing.pem"),
    ]
    env = {k: v for k, v in os.environ.items() if k != "MSGSTORE_ENDPOINT"}
    for args, words in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "storage_node.cli", "console", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=tmp_path,
        )
        assert proc.returncode != 0, args
        assert words in proc.stderr and "console:" not in proc.stdout, (args, proc.stderr)
