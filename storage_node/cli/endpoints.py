"""Which nodes a command may ask: the ``--endpoint`` list (MSGSTORE_ENDPOINT) first, then the
nodes of the local cluster in MSGSTORE_LOCAL_DIR (its ``cluster.json``), so a command still
finds the cluster after the node it was pointed at went down."""

from __future__ import annotations

import os
from pathlib import Path

from storage_node.cli.local_state import read_state

LOCAL_DIR_ENV = "MSGSTORE_LOCAL_DIR"


def endpoints_to_try(given: str) -> list[str]:
    """``given`` (comma-separated) followed by the local cluster's other node addresses,
    each once, in order. A broken or absent ``cluster.json`` adds nothing."""
    out = [e.strip() for e in given.split(",") if e.strip()]
    local_dir = os.environ.get(LOCAL_DIR_ENV)
    if local_dir:
        try:
            doc = read_state(Path(local_dir))
        except (OSError, ValueError):
            doc = {}
        nodes = doc.get("nodes") if isinstance(doc, dict) else None
        for node in nodes if isinstance(nodes, list) else []:
            address = node.get("address") if isinstance(node, dict) else None
            if isinstance(address, str) and address.rstrip("/") not in {e.rstrip("/") for e in out}:
                out.append(address)
    return out


def with_local_paths(message: str) -> str:
    """An error message whose generic ``DIR/tls/ca.crt`` names the local cluster's own CA
    file when MSGSTORE_LOCAL_DIR has one (a hint the user can paste)."""
    local_dir = os.environ.get(LOCAL_DIR_ENV)
    if local_dir and "DIR/tls/ca.crt" in message:
        ca = Path(local_dir).resolve() / "tls" / "ca.crt"
        if ca.is_file():
            return message.replace("DIR/tls/ca.crt", str(ca))
    return message
