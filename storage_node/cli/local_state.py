"""What a local cluster's directory records (``cluster.json``: nodes, ports, pids, the
environment the nodes run with) and how a recorded process is told apart: running, stopped
cleanly (its pid cleared by ``local stop``/``down``) or crashed (recorded, but gone).

``cluster.json`` may hold the bearer token (``env``), so it is written owner-only (0600),
as the TLS keys are.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE_FILE = "cluster.json"
ROUTING_FILE = "routing.json"
TLS_DIR = "tls"
ACCESS_FILE = "access.json"  # users and ACL rules every node shares (0600: token digests)
SECRET_MODE = 0o600


@dataclass
class NodeProcess:
    id: str
    address: str
    port: int
    pid: int
    data_dir: str
    log: str
    kafka_port: int = 0  # its Kafka listener (docs/KAFKA.md)


def read_state(directory: Path) -> dict[str, Any]:
    """The recorded state of the cluster in ``directory`` ({} when there is none)."""
    state = directory / STATE_FILE
    if not state.exists():
        return {}
    doc: dict[str, Any] = json.loads(state.read_text())
    return doc


def write_state(directory: Path, doc: dict[str, Any]) -> None:
    """Replace ``cluster.json`` atomically, owner-only from its first byte (it may hold the
    token); an older file that was world-readable is replaced by a 0600 one."""
    tmp = directory / (STATE_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRET_MODE)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), SECRET_MODE)  # an old .tmp kept its mode through O_CREAT
        fh.write(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, directory / STATE_FILE)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        waited, _ = os.waitpid(pid, os.WNOHANG)
        return waited == 0
    except ChildProcessError:
        return True


def is_our_process(pid: int, marker: str) -> bool:
    """Only signal a process whose command line is ours for that directory or file."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return alive(pid)
    return marker.encode() in cmdline and any(b"storage_node" in part for part in cmdline)


def pid_running(pid: int, marker: str) -> bool:
    return bool(pid) and alive(pid) and is_our_process(pid, marker)


def process_state(pid: int, marker: str) -> str:
    """``running``; ``stopped`` (no pid recorded: stopped by ``local stop``/``down``); or
    ``crashed`` (a pid is recorded but that process is gone: killed or failed)."""
    if pid_running(pid, marker):
        return "running"
    return "crashed" if pid else "stopped"


def node_ip_for(node_id: str) -> str:
    """A distinct loopback IP per local node: message IDs embed the node IP (app-iphex-hour-seq),
    so nodes sharing one IP would hand out colliding IDs."""
    index = int(node_id.rsplit("-", 1)[-1])
    return f"127.{(index + 1) >> 16 & 255}.{(index + 1) >> 8 & 255}.{(index + 1) & 255}"
