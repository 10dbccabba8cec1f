"""The failover controller of a ``msgstore local`` cluster, as a process:
``python -m storage_node.cli.controller --routing-file F`` (docs/REPLICATION.md). The
decisions are storage_node/replication/controller.py's; this module reads and writes the
routing file under the lock topic creation takes too."""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

from storage_node import structured_log
from storage_node.mtls import PeerIdentity
from storage_node.replication.controller import Controller
from storage_node.server.routing_state import read_routing_file, write_routing_file
from storage_node.wire.routing_table import RoutingTable

log = logging.getLogger("msgstore.controller")


def file_table(
    path: str,
) -> tuple[
    Callable[[], RoutingTable],
    Callable[[Callable[[RoutingTable], RoutingTable | None]], RoutingTable],
]:
    """Read and update a routing file under the lock topic creation takes too."""

    def read() -> RoutingTable:
        return read_routing_file(path)

    def update(change: Callable[[RoutingTable], RoutingTable | None]) -> RoutingTable:
        with open(path + ".lock", "a+") as lock_fh:
            fcntl.flock(lock_fh, fcntl.LOCK_EX)
            try:
                table = read_routing_file(path)
                new = change(table)
                if new is not None:
                    write_routing_file(path, new)
                    return new
                return table
            finally:
                fcntl.flock(lock_fh, fcntl.LOCK_UN)

    return read, update


def main(argv: list[str] | None = None) -> int:
    """Run the controller until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="msgstore-controller")
    parser.add_argument("--routing-file", required=True)
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds a leader may be gone")
    parser.add_argument(
        "--tls-cert",
        default=os.environ.get("MSGSTORE_TLS_CERT", ""),
        help="the controller's client certificate (mTLS between nodes; env MSGSTORE_TLS_CERT)",
    )
    parser.add_argument(
        "--tls-key",
        default=os.environ.get("MSGSTORE_TLS_KEY", ""),
        help="its private key (env MSGSTORE_TLS_KEY)",
    )
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("a client certificate needs both --tls-cert and --tls-key")
    token = os.environ.get("MSGSTORE_TOKEN", "")
    try:
        fmt = structured_log.check_format(os.environ.get("MSGSTORE_LOG_FORMAT", "json"))
    except ValueError as exc:
        parser.error(f"MSGSTORE_LOG_FORMAT: {exc}")
    structured_log.configure("controller", "INFO", fmt, (token,))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    read, update = file_table(args.routing_file)
    ca = os.environ.get("MSGSTORE_TLS_CA", "")
    # the files are re-read when they change (a renewed certificate, a rotated CA bundle)
    identity = PeerIdentity(ca, args.tls_cert, args.tls_key) if ca or args.tls_cert else None
    ctl = Controller(read, update, headers, ca or True, args.timeout, identity=identity)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log.info("controlling %s (leader timeout %.1fs)", args.routing_file, args.timeout)
    ctl.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
