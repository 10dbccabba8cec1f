"""A local cluster: N node processes on loopback sharing one routing file.

``msgstore local up/down`` and ``make run`` use it, and so do tests. Layout of DIR:
``routing.json`` (docs/ROUTING.md), ``cluster.json`` (pids, ports: ``local_state``),
``node-<i>/`` (each node's data directory, with ``node.log``), ``tls/`` (``local_tls``),
``access.json`` (users and ACL rules, shared by every node: ``msgstore user|acl``).

Over 400 lines on purpose: the life cycle of one local cluster (routing file, start,
readiness, restart, stop, the failover controller's process) over the same state file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import requests

from storage_node.access.access_file import write_access_file
from storage_node.access.document import AccessDocument
from storage_node.cli.local_state import (
    ACCESS_FILE,
    ROUTING_FILE,
    STATE_FILE,
    TLS_DIR,
    NodeProcess,
    alive,
    node_ip_for,
    pid_running,
    process_state,
    read_state,
    write_state,
)
from storage_node.cli.local_tls import CONTROLLER, ensure_local_tls
from storage_node.cli.ports import free_port, port_free
from storage_node.errors import InvalidArgument, Unavailable
from storage_node.formats.filenames import NODE_LOG
from storage_node.server.routing_state import read_routing_file, write_routing_file
from storage_node.wire.routing_table import (
    NodeEntry,
    RoutingTable,
    check_replication,
    new_local_table,
)

# How long a starting node (or the controller naming leaders) is waited for. A node that exits
# is reported at once; a live one that is slow is waited for: on a loaded 2-core machine three
# nodes of `local up` took 80 s to answer /readyz (each ask may take 5 s there).
START_TIMEOUT_S = 180.0


def node_command(
    node: NodeProcess,
    routing_file: str,
    host: str,
    extra_args: list[str] | None = None,
    tls_dir: Path | None = None,
) -> list[str]:
    tls_args = []
    if tls_dir is not None:
        tls_args = [
            "--tls-cert",
            str(tls_dir / f"{node.id}.crt"),
            "--tls-key",
            str(tls_dir / f"{node.id}.key"),
            *("--set", "peer_mtls=true"),  # the CA bundle comes as MSGSTORE_TLS_CA
        ]
    return [
        sys.executable,
        "-m",
        "storage_node.cli",
        "serve",
        "--data-dir",
        node.data_dir,
        "--host",
        host,
        "--port",
        str(node.port),
        "--node-id",
        node.id,
        "--routing-file",
        routing_file,
        "--set",
        f"node_ip={node_ip_for(node.id)}",
        *tls_args,
        *(["--kafka-port", str(node.kafka_port)] if node.kafka_port else []),
        *(extra_args or []),
    ]


class LocalCluster:
    """Start, stop and restart the node processes of one cluster directory."""

    def __init__(self, data_dir: str | os.PathLike[str], host: str = "127.0.0.1") -> None:
        self.dir = Path(data_dir).resolve()
        self.host = host
        self.nodes: list[NodeProcess] = []
        self.env: dict[str, str] = {}
        self.extra_args: list[str] = []
        self.tls = False
        self.replication_factor = 1
        self.min_in_sync: int | None = None
        self.controller_pid = 0  # the failover controller of replicated logs
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        doc = read_state(self.dir)
        if doc:
            self.nodes = [NodeProcess(**n) for n in doc.get("nodes", [])]
            self.env = doc.get("env", {})
            self.extra_args = doc.get("extra_args", [])
            self.tls = bool(doc.get("tls", False))
            self.controller_pid = int(doc.get("controller_pid", 0))

    @property
    def routing_file(self) -> str:
        return str(self.dir / ROUTING_FILE)

    @property
    def access_file(self) -> Path:
        """The access document every node reads (users and ACL rules)."""
        return self.dir / ACCESS_FILE

    @property
    def tls_dir(self) -> Path | None:
        return self.dir / TLS_DIR if self.tls else None

    @property
    def ca_file(self) -> str | None:
        """The CA certificate clients verify the nodes with (None without TLS)."""
        return str(self.dir / TLS_DIR / "ca.crt") if self.tls else None

    @property
    def addresses(self) -> list[str]:
        return [n.address for n in self.nodes]

    def kafka_address(self, node: NodeProcess) -> str | None:
        """host:port of a node's Kafka listener (None for a node started without one)."""
        return f"{self.host}:{node.kafka_port}" if node.kafka_port else None

    def _save(self) -> None:
        doc = {
            "nodes": [asdict(n) for n in self.nodes],
            "env": self.env,
            "extra_args": self.extra_args,
            "tls": self.tls,
            "controller_pid": self.controller_pid,
        }
        write_state(self.dir, doc)

    def running(self) -> list[NodeProcess]:
        return [n for n in self.nodes if pid_running(n.pid, n.data_dir)]

    def up(
        self,
        nodes: int = 3,
        base_port: int | None = None,
        env: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
        timeout: float = START_TIMEOUT_S,
        tls: bool = False,
        replication_factor: int = 1,
        min_in_sync: int | None = None,
    ) -> list[NodeProcess]:
        """Start every node (a restart keeps topics and data); returns once all are ready.

        With ``tls`` the nodes serve HTTPS with certificates of a CA kept in DIR/tls
        (``ca_file``); clients need that file (``--ca`` / MSGSTORE_CA). With
        ``replication_factor`` above 1 (a new cluster only) every node's log is copied by the
        next nodes and a controller process fails lost leaders over (docs/REPLICATION.md)."""
        if not 1 <= nodes <= 64:
            raise InvalidArgument("a local cluster has 1 to 64 nodes")
        check_replication(replication_factor, min_in_sync)
        if replication_factor > nodes:
            raise InvalidArgument(
                f"a replication factor of {replication_factor} needs at least that many nodes"
            )
        if self.running():
            raise InvalidArgument(
                f"a cluster is already running in {self.dir}; stop it with 'msgstore local down'"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(env or {})
        self.extra_args = list(extra_args or [])
        # ports are kept from the last run, so addresses (MSGSTORE_ENDPOINT) stay valid
        previous = {n.id: n.port for n in self.nodes}
        previous_kafka = {n.id: n.kafka_port for n in self.nodes}
        self.tls = tls
        self.replication_factor = replication_factor
        self.min_in_sync = min_in_sync
        scheme = "https" if tls else "http"
        self.nodes = []
        for i in range(nodes):
            taken = {n.port for n in self.nodes}
            port = base_port + i if base_port else previous.get(f"node-{i}")
            if port is None:
                port = free_port(self.host, taken)
            elif not port_free(self.host, port):
                raise InvalidArgument(
                    f"port {port} of node-{i} (kept from the last run in {self.dir / STATE_FILE})"
                    " is taken by another process; free it or start with --base-port"
                )
            taken |= {n.kafka_port for n in self.nodes} | {port}
            kafka_port = previous_kafka.get(f"node-{i}") or free_port(self.host, taken)
            node_dir = self.dir / f"node-{i}"
            node_dir.mkdir(exist_ok=True)
            self.nodes.append(
                NodeProcess(
                    id=f"node-{i}",
                    address=f"{scheme}://{self.host}:{port}",
                    port=port,
                    pid=0,
                    data_dir=str(node_dir),
                    log=str(node_dir / NODE_LOG),
                    kafka_port=kafka_port,
                )
            )
        if self.tls_dir is not None:
            ensure_local_tls(self.tls_dir, [n.id for n in self.nodes], self.host)
            self.env.setdefault("MSGSTORE_TLS_CA", str(self.ca_file))
        if not self.access_file.exists():
            write_access_file(self.access_file, AccessDocument())  # 0600: token digests
        self.env.setdefault("MSGSTORE_ACCESS_FILE", str(self.access_file))
        self._write_routing()
        for node in self.nodes:
            self._spawn(node)
        replicated = bool(read_routing_file(self.routing_file).logs)
        if replicated:
            self._spawn_controller()
        self._save()
        try:
            self.wait_ready(timeout)
            if replicated:
                self.wait_leaders(timeout)
        except Unavailable:  # a cluster that did not come up is not left running
            self.down()
            raise
        return self.nodes

    def wait_leaders(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until the controller named a leader of every replicated log after (re)start."""
        deadline = time.monotonic() + timeout
        while True:
            table = read_routing_file(self.routing_file)
            if all(lg.epoch > 0 for lg in table.logs.values()):
                return
            if time.monotonic() > deadline:
                raise Unavailable(f"no leader named after {timeout}s; see controller.log")
            time.sleep(0.05)

    def _spawn_controller(self) -> None:
        command = [sys.executable, "-m", "storage_node.cli.controller"]
        command += ["--routing-file", str(self.routing_file)]
        if self.tls_dir is not None:  # its client certificate (mTLS between nodes)
            command += ["--tls-cert", str(self.tls_dir / f"{CONTROLLER}.crt")]
            command += ["--tls-key", str(self.tls_dir / f"{CONTROLLER}.key")]
        proc = self._start(command, self.dir / "controller.log")
        self.controller_pid = proc.pid
        self._procs["controller"] = proc

    def _start(self, command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        """A child in its own session (so Ctrl-C at the terminal does not reach it), its
        output appended to ``log_path``."""
        env = {**os.environ, **self.env}
        log = open(log_path, "ab")  # noqa: SIM115 - handed to the child process
        try:
            return subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        finally:
            log.close()

    def _stop_controller(self) -> None:
        pid = self.controller_pid
        if pid_running(pid, self.routing_file):
            os.kill(pid, signal.SIGTERM)
            proc = self._procs.get("controller")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and alive(pid):
                if proc is not None and proc.poll() is not None:
                    break
                time.sleep(0.05)
            if alive(pid) and (proc is None or proc.poll() is None):
                os.kill(pid, signal.SIGKILL)
        self.controller_pid = 0

    def _write_routing(self) -> None:
        """Keep topics of an earlier run; node addresses follow this run's ports."""
        entries = tuple(
            NodeEntry(n.id, n.address, kafka_address=self.kafka_address(n)) for n in self.nodes
        )
        if Path(self.routing_file).exists():
            old = read_routing_file(self.routing_file)
            owners = {o for t in old.topics.values() for o in t.owners}
            owners |= {r for lg in old.logs.values() for r in lg.replicas}
            owners -= set(old.logs)  # partitions owned by replicated logs
            missing = owners - {n.id for n in self.nodes}
            if missing:
                raise InvalidArgument(
                    f"nodes {sorted(missing)} own partitions in {self.routing_file}; "
                    "start at least as many nodes as before"
                )
            table = RoutingTable(
                old.generation + 1,
                "local",
                entries,
                old.topics,
                old.raw,
                old.logs,
                old.replication_factor,
                old.min_in_sync,
            )
        else:
            table = new_local_table(
                [(n.id, n.address) for n in self.nodes], self.replication_factor, self.min_in_sync
            )
            table = replace(table, nodes=entries)  # with their Kafka addresses
        write_routing_file(self.routing_file, table)

    def _spawn(self, node: NodeProcess) -> None:
        # a lost or replaced volume: the node starts on an empty directory (a replicated
        # node then copies its logs back from their leaders, docs/REPLICATION.md)
        Path(node.data_dir).mkdir(parents=True, exist_ok=True)
        command = node_command(node, self.routing_file, self.host, self.extra_args, self.tls_dir)
        proc = self._start(command, Path(node.log))
        node.pid = proc.pid
        self._procs[node.id] = proc

    def wait_ready(
        self, timeout: float = START_TIMEOUT_S, nodes: list[NodeProcess] | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        for node in nodes or self.nodes:
            while True:
                if not alive(node.pid):
                    raise Unavailable(
                        f"node {node.id} exited during startup; log {node.log}:\n"
                        + self._log_tail(node)
                    )
                try:
                    verify: str | bool = self.ca_file or True
                    answer = requests.get(node.address + "/readyz", timeout=5, verify=verify)
                    if answer.status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if time.monotonic() > deadline:
                    raise Unavailable(f"node {node.id} not ready after {timeout}s; log {node.log}")
                time.sleep(0.05)

    @staticmethod
    def _log_tail(node: NodeProcess, lines: int = 20) -> str:
        try:
            return "\n".join(Path(node.log).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def node(self, node_id: str) -> NodeProcess:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise InvalidArgument(f"no node {node_id!r} in {self.dir}")

    def kill(self, node_id: str, sig: int = signal.SIGKILL) -> None:
        """Signal one node (SIGKILL by default: a crash) and wait until it is gone."""
        node = self.node(node_id)
        if pid_running(node.pid, node.data_dir):
            os.kill(node.pid, sig)
            self._wait_exit(node, 30.0)

    def is_running(self, node: NodeProcess) -> bool:
        return pid_running(node.pid, node.data_dir)

    def state(self, node: NodeProcess) -> str:
        """``running``, ``stopped`` (by ``local stop``/``down``, or it exited cleanly on its
        own: its log ends with the clean close) or ``crashed`` (killed or failed)."""
        found = process_state(node.pid, node.data_dir)
        if found == "crashed":
            lines = self._log_tail(node, 200).splitlines()
            last_start = max((i for i, t in enumerate(lines) if "listening on" in t), default=-1)
            last_clean = max((i for i, t in enumerate(lines) if "closed cleanly" in t), default=-1)
            if last_clean > last_start:  # its last run ended with the clean close
                return "stopped"
        return found

    def health(self, node: NodeProcess) -> str:
        """ready, not ready (with the reason), or the state of a node that does not run."""
        if not self.is_running(node):
            return self.state(node)
        try:
            resp = requests.get(node.address + "/readyz", timeout=2, verify=self.ca_file or True)
        except requests.RequestException as exc:
            return f"not answering ({type(exc).__name__})"
        if resp.status_code == 200:
            return "ready"
        return f"not ready (HTTP {resp.status_code})"

    def stop(self, node_id: str, timeout: float = 30.0) -> bool:
        """Stop one node cleanly (SIGTERM, then SIGKILL); False when it was not running."""
        node = self.node(node_id)
        if not self.is_running(node):
            node.pid = 0
            self._save()
            return False
        os.kill(node.pid, signal.SIGTERM)
        if not self._wait_exit(node, timeout):
            os.kill(node.pid, signal.SIGKILL)
            self._wait_exit(node, 10.0)
        node.pid = 0
        self._save()
        return True

    def restart(
        self, node_id: str, timeout: float = START_TIMEOUT_S, stop_first: bool = False
    ) -> NodeProcess:
        """Start a stopped node again on the same port and data directory (``stop_first``:
        stop it first when it runs)."""
        node = self.node(node_id)
        if self.is_running(node):
            if not stop_first:
                raise InvalidArgument(f"node {node_id} is still running")
            self.stop(node_id)
        if not port_free(self.host, node.port):
            raise InvalidArgument(
                f"port {node.port} of {node_id} is taken by another process; free it first"
            )
        self._spawn(node)
        self._save()
        self.wait_ready(timeout, [node])
        return node

    def _wait_exit(self, node: NodeProcess, timeout: float) -> bool:
        proc = self._procs.get(node.id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None:
                if proc.poll() is not None:
                    return True
            elif not alive(node.pid):
                return True
            time.sleep(0.05)
        return False

    def down(self, timeout: float = 30.0) -> list[str]:
        """SIGTERM every node (flush + clean shutdown), SIGKILL stragglers; returns stopped ids."""
        stopped = []
        self._stop_controller()
        for node in self.nodes:
            if pid_running(node.pid, node.data_dir):
                os.kill(node.pid, signal.SIGTERM)
                stopped.append(node.id)
        for node in self.nodes:
            if node.id in stopped and not self._wait_exit(node, timeout):
                os.kill(node.pid, signal.SIGKILL)
                self._wait_exit(node, 10.0)
        for node in self.nodes:
            node.pid = 0
        if self.dir.exists():
            self._save()
        return stopped

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()
