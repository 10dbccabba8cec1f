"""Fixtures for node tests: real `msgstore serve` processes on OS-chosen loopback ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_node.cli.local import LocalCluster, free_port
from tests.waiting import wait_node_ready


class NodeProcess:
    """One node server process with its own data directory."""

    def __init__(
        self, data_dir: Path, env: dict[str, str] | None = None, args: list[str] | None = None
    ):
        self.data_dir = data_dir
        self.env = dict(env or {})
        self.args = list(args or [])
        self.port = free_port()
        self.address = f"http://127.0.0.1:{self.port}"
        self.log = data_dir / "node.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> NodeProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "storage_node.cli",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            *self.args,
        ]
        env = {**os.environ, "MSGSTORE_LIFECYCLE_INTERVAL_S": "0", **self.env}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        if wait:
            try:
                self.wait_ready()
            except BaseException:  # a node that never became ready is not left running
                self.proc.kill()
                self.proc.wait(30)
                raise
        return self

    def wait_ready(self, timeout: float = 180.0) -> None:
        assert self.proc is not None
        wait_node_ready(self.proc, self.url("/readyz"), self.log.read_text, timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def url(self, path: str) -> str:
        return self.address + path


@pytest.fixture
def node_factory(tmp_path: Path) -> Iterator:
    started: list[NodeProcess] = []

    def make(
        name: str = "node",
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        wait: bool = True,
    ) -> NodeProcess:
        node = NodeProcess(tmp_path / name, env, args)
        started.append(node.start(wait))
        return node

    yield make
    for node in started:
        node.stop(signal.SIGKILL if node.proc and node.proc.poll() is None else signal.SIGTERM)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One standalone node shared by a module's tests (each test uses its own topics)."""
    n = NodeProcess(
        tmp_path_factory.mktemp("node"),
        {"MSGSTORE_MAX_MESSAGE_BYTES": "65536"},
        ["--set", "max_body_bytes=1048576"],
    )
    n.start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local 3-node cluster (real processes, shared routing file)."""
    c = LocalCluster(tmp_path_factory.mktemp("cluster"))
    c.up(nodes=3, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0"})
    yield c
    c.down()


def topic_name(request: pytest.FixtureRequest) -> str:
    return "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name)[:150]
