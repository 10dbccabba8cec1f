"""A replicated msgstore cluster of node processes, each in its own network namespace.

The fixture builds a hub namespace holding a bridge; every node, the controller and the
test process (through one veth in the test's own namespace) get an address on it. Faults
are real: SIGKILL of a process, iptables rules inside one node's namespace (cut off from
the other nodes and the controller while the test's clients still reach it), a data
directory deleted. The routing table is handed to each node's own copy by a distributor
that skips a cut-off node, as the operator's ConfigMap would never reach it. Everything
made here (namespaces, links, processes) is removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests

from storage_node import tls
from storage_node.cli.local import NodeProcess, node_command
from storage_node.server.routing_state import read_routing_file, write_routing_file
from storage_node.wire.routing_table import new_local_table
from tests.waiting import wait_node_ready

PORT = 7100


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


def netns_available() -> str | None:
    """Why namespaces cannot be used here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (ip netns)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    name = f"msprobe{os.getpid() % 100000}"
    try:
        _run("ip", "netns", "add", name)
        _run("ip", "netns", "del", name)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"cannot create a network namespace: {exc}"
    return None


class NetnsCluster:
    def __init__(
        self,
        root: Path,
        nodes: int = 3,
        factor: int = 3,
        leader_timeout: float = 2.0,
        tls: bool = False,
    ):
        """With ``tls`` the nodes serve HTTPS with mTLS between them (certificates of a CA
        made here, for each node's address); the test process verifies with
        ``ca_file`` (REQUESTS_CA_BUNDLE) and ``controller_cert`` acts as the controller."""
        tag = f"{os.getpid() % 1000:03d}"
        self.tag = tag
        self.root = root
        self.subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
        self.hub = f"mshub{tag}"
        self.bridge = "msbr0"
        self.host_if = f"msh{tag}"
        self.host_ip = f"{self.subnet}.1"
        self.ctl_ip = f"{self.subnet}.9"
        self.names = [f"node-{i}" for i in range(nodes)]
        self.ns = {n: f"ms{tag}n{i}" for i, n in enumerate(self.names)}
        self.ns["controller"] = f"ms{tag}ctl"
        self.ip = {n: f"{self.subnet}.{10 + i}" for i, n in enumerate(self.names)}
        self.ip["controller"] = self.ctl_ip
        self.factor = factor
        self.leader_timeout = leader_timeout
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.routing_file = str(root / "routing.json")
        self.cut_off: set[str] = set()
        self._stop = threading.Event()
        self._made: list[list[str]] = []  # undo commands, run in reverse
        self._distributor: threading.Thread | None = None
        self.tls_dir: Path | None = None
        self.ca_file: str | None = None
        self.controller_cert: tuple[str, str] | None = None
        if tls:
            self._issue_certificates()

    def _issue_certificates(self) -> None:
        self.tls_dir = self.root / "tls"
        ca = tls.new_ca("netns test CA")
        self.ca_file = str(tls.write_pair(self.tls_dir, "ca", ca)[0])
        for name in self.names:
            pair = tls.issue_cert(ca, name, ["localhost"], [self.ip[name]], unit=tls.NODE_UNIT)
            tls.write_pair(self.tls_dir, name, pair)
        pair = tls.issue_cert(ca, "controller", ["controller"], unit=tls.CONTROLLER_UNIT)
        cert, key = tls.write_pair(self.tls_dir, "controller", pair)
        self.controller_cert = (str(cert), str(key))

    def _env(self) -> dict[str, str]:
        return {**os.environ, **({"MSGSTORE_TLS_CA": self.ca_file} if self.ca_file else {})}

    # -- network --------------------------------------------------------------------------
    def _net(self) -> None:
        _run("ip", "netns", "add", self.hub)
        self._made.append(["ip", "netns", "del", self.hub])
        hub = ["ip", "-n", self.hub]
        _run(*hub, "link", "add", self.bridge, "type", "bridge")
        _run(*hub, "link", "set", self.bridge, "up")
        _run(*hub, "link", "set", "lo", "up")
        # the test's own end
        _run(
            "ip",
            "link",
            "add",
            self.host_if,
            "type",
            "veth",
            "peer",
            "name",
            "hostp",
            "netns",
            self.hub,
        )
        self._made.append(["ip", "link", "del", self.host_if])
        _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_if)
        _run("ip", "link", "set", self.host_if, "up")
        _run(*hub, "link", "set", "hostp", "master", self.bridge)
        _run(*hub, "link", "set", "hostp", "up")
        for i, (name, ns) in enumerate(self.ns.items()):
            _run("ip", "netns", "add", ns)
            self._made.append(["ip", "netns", "del", ns])
            port = f"p{i}"
            _run(*hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run(*hub, "link", "set", port, "master", self.bridge)
            _run(*hub, "link", "set", port, "up")
            inside = ["ip", "-n", ns]
            _run(*inside, "addr", "add", f"{self.ip[name]}/24", "dev", "eth0")
            _run(*inside, "link", "set", "eth0", "up")
            _run(*inside, "link", "set", "lo", "up")

    def address(self, name: str) -> str:
        return f"{'https' if self.tls_dir else 'http'}://{self.ip[name]}:{PORT}"

    # -- processes -------------------------------------------------------------------------
    def node_dir(self, name: str) -> Path:
        return self.root / name

    def _node_routing(self, name: str) -> str:
        return str(self.node_dir(name) / "routing.json")

    def start(self, topic: str, partitions: int) -> None:
        self._net()
        table = new_local_table([(n, self.address(n)) for n in self.names], self.factor)
        table = table.with_topic(topic, partitions, "lz4", 24.0)
        write_routing_file(self.routing_file, table)
        for name in self.names:
            self.node_dir(name).mkdir(parents=True, exist_ok=True)
            write_routing_file(self._node_routing(name), table)
            self.spawn(name)
        self._spawn_controller()
        self._distributor = threading.Thread(target=self._distribute, daemon=True)
        self._distributor.start()
        for name in self.names:
            self.wait_ready(name)
        self.wait_in_sync()

    def spawn(self, name: str) -> None:
        node = NodeProcess(name, self.address(name), PORT, 0, str(self.node_dir(name)), "")
        self.node_dir(name).mkdir(parents=True, exist_ok=True)
        if not os.path.exists(self._node_routing(name)):
            shutil.copy(self.routing_file, self._node_routing(name))
        cmd = node_command(
            node,
            self._node_routing(name),
            self.ip[name],
            ["--set", "node_ip=" + self.ip[name]],
            self.tls_dir,
        )
        with open(self.root / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                ["ip", "netns", "exec", self.ns[name], *cmd],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self._env(),
            )

    def _spawn_controller(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "storage_node.cli.controller",
            "--routing-file",
            self.routing_file,
            "--timeout",
            str(self.leader_timeout),
        ]
        if self.controller_cert is not None:
            cmd += ["--tls-cert", self.controller_cert[0], "--tls-key", self.controller_cert[1]]
        with open(self.root / "controller.log", "ab") as log:
            self.procs["controller"] = subprocess.Popen(
                ["ip", "netns", "exec", self.ns["controller"], *cmd],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self._env(),
            )

    def _distribute(self) -> None:
        """Copy the controller's table to every node not cut off (the ConfigMap's role)."""
        last: dict[str, int] = {}
        while not self._stop.wait(0.1):
            try:
                table = read_routing_file(self.routing_file)
            except Exception:  # noqa: BLE001 - being replaced right now
                continue
            for name in self.names:
                if name in self.cut_off or last.get(name) == table.generation:
                    continue
                write_routing_file(self._node_routing(name), table)
                last[name] = table.generation

    def wait_ready(self, name: str, timeout: float = 180.0) -> None:
        wait_node_ready(
            self.procs[name], self.address(name) + "/readyz", lambda: self.log_tail(name), timeout
        )

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)

    def restart(self, name: str, wipe: bool = False) -> None:
        self.kill(name)
        if wipe:
            shutil.rmtree(self.node_dir(name))
        self.spawn(name)
        self.wait_ready(name)

    # -- faults ------------------------------------------------------------------------------
    def cut(self, name: str) -> None:
        """Drop everything between ``name`` and the other nodes and the controller (inside
        its namespace); the test's clients still reach it."""
        self.cut_off.add(name)
        for other in [n for n in self.ip if n != name]:
            for chain, flag in (("INPUT", "-s"), ("OUTPUT", "-d")):
                _run(
                    "ip",
                    "netns",
                    "exec",
                    self.ns[name],
                    "iptables",
                    "-A",
                    chain,
                    flag,
                    self.ip[other],
                    "-j",
                    "DROP",
                )

    def heal(self, name: str) -> None:
        for chain in ("INPUT", "OUTPUT"):
            _run("ip", "netns", "exec", self.ns[name], "iptables", "-F", chain)
        self.cut_off.discard(name)

    # -- state -------------------------------------------------------------------------------
    def table(self) -> Any:
        return read_routing_file(self.routing_file)

    def status(self, name: str) -> dict[str, Any]:
        return requests.get(self.address(name) + "/v1/replication/status", timeout=5).json()

    def wait_in_sync(self, timeout: float = 60.0) -> None:
        """Until every log's leader reports every replica in sync and at its end."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            table = self.table()
            ok = True
            for log_id, route in table.logs.items():
                try:
                    doc = self.status(route.leader)["logs"][log_id]
                except (requests.RequestException, KeyError, ValueError):
                    ok = False
                    break
                followers = doc.get("followers", {})
                if (
                    doc.get("role") != "leader"
                    or len(followers) < len(route.replicas) - 1
                    or any(not f["in_sync"] or f["lag_bytes"] for f in followers.values())
                ):
                    ok = False
                    break
            if ok:
                return
            time.sleep(0.2)
        raise AssertionError("replicas did not catch up")

    def stop(self) -> None:
        self._stop.set()
        if self._distributor is not None:
            self._distributor.join()
        for name, proc in self.procs.items():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM if name != "controller" else signal.SIGKILL)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for cmd in reversed(self._made):
            subprocess.run(cmd, capture_output=True)


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)
