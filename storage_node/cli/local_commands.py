"""``msgstore local up|down|status|stop|restart|rotate-ca``: a cluster of node processes on loopback
(``local.LocalCluster``), kept in a data directory."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from storage_node.cli.common import UsageError


def _cluster(args: argparse.Namespace, existing: bool = True) -> Any:
    """The cluster of ``--data-dir``; with ``existing``, one that was started there before
    (a missing or empty directory is a usage error: nothing was asked of a node)."""
    from storage_node.cli.local import LocalCluster

    directory = Path(args.data_dir)
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"--data-dir {args.data_dir} is not a directory")
    cluster = LocalCluster(directory)
    if existing and not cluster.nodes:
        raise UsageError(
            f"no local cluster in {args.data_dir} (start one with 'msgstore local up "
            f"--data-dir {args.data_dir}')"
        )
    return cluster


def cmd_local_up(args: argparse.Namespace) -> int:
    env = {"MSGSTORE_TOKEN": args.token} if args.token else {}
    cluster = _cluster(args, existing=False)
    nodes = cluster.up(
        nodes=args.nodes,
        base_port=args.base_port,
        env=env,
        tls=args.tls,
        replication_factor=args.replication_factor,
        min_in_sync=args.min_in_sync,
    )
    for n in nodes:
        kafka = cluster.kafka_address(n) or "-"
        print(f"{n.id} {n.address} kafka={kafka} pid={n.pid} log={n.log}")
    print(f"routing table: {cluster.routing_file}")
    if args.console:
        from storage_node.cli.local_console import LocalConsole

        console = LocalConsole(cluster.dir).start(
            cluster.addresses, token=args.token, ca=cluster.ca_file, admin=args.console_admin
        )
        print(f"console: {console.url} pid={console.pid} log={cluster.dir / 'console.log'}")
    if cluster.ca_file:
        print(f"CA certificate: {cluster.ca_file} (use --ca or MSGSTORE_CA)")
    hint = kafka_client_settings(bool(args.token), cluster.ca_file)
    if hint:
        print(f"Kafka clients: {hint}")
    return 0


def kafka_client_settings(token: bool, ca_file: str | None) -> str:
    """The librdkafka settings a Kafka client needs for a cluster with a token and/or TLS
    (docs/KAFKA.md, "Security"); empty for a PLAINTEXT cluster."""
    parts = []
    if token:
        protocol = "SASL_SSL" if ca_file else "SASL_PLAINTEXT"
        parts.append(f"security.protocol={protocol} sasl.mechanisms=PLAIN")
        parts.append("sasl.username=any sasl.password=<the token>")
    elif ca_file:
        parts.append("security.protocol=SSL")
    if ca_file:
        parts.append(f"ssl.ca.location={ca_file}")
    return " ".join(parts)


def cmd_local_down(args: argparse.Namespace) -> int:
    from storage_node.cli.local_console import LocalConsole

    cluster = _cluster(args, existing=False)
    if LocalConsole(cluster.dir).stop():
        print("stopped the console")
    stopped = cluster.down()
    print(f"stopped {len(stopped)} node(s): {' '.join(stopped) or '-'}")
    return 0


def cmd_local_status(args: argparse.Namespace) -> int:
    from storage_node.cli.local_state import process_state
    from storage_node.server.routing_state import read_routing_file

    cluster = _cluster(args)
    print(f"{'NODE':<8} {'STATE':<8} {'PID':>7}  {'ADDRESS':<26} {'KAFKA':<21} HEALTH")
    for n in cluster.nodes:
        state = cluster.state(n)
        pid = str(n.pid) if state == "running" else "-"
        health = cluster.health(n)
        if state == "crashed":
            health = f"exited without 'local stop' (pid {n.pid}); see {n.log}"
        kafka = cluster.kafka_address(n) or "-"
        print(f"{n.id:<8} {state:<8} {pid:>7}  {n.address:<26} {kafka:<21} {health}")
    from storage_node.cli.local_console import LocalConsole

    console = LocalConsole(cluster.dir)
    if console.process is not None:
        where = f"{console.process.url} (pid {console.process.pid})" if console.running() else "-"
        print(f"console: {'running' if console.running() else 'stopped'} {where}")
    table = read_routing_file(cluster.routing_file)
    if not table.logs:
        print("controller: none (replication factor 1: each node serves its own log)")
        return 0
    state = process_state(cluster.controller_pid, cluster.routing_file)
    where = f" (pid {cluster.controller_pid})" if cluster.controller_pid else ""
    print(f"controller: {state}{where}; log {cluster.dir / 'controller.log'}")
    print(f"{'LOG':<8} {'LEADER':<8} {'EPOCH':>5}  REPLICAS")
    for log_id in sorted(table.logs):
        lg = table.logs[log_id]
        leader = lg.leader if lg.epoch > 0 else "-"
        print(f"{log_id:<8} {leader:<8} {lg.epoch:>5}  {','.join(lg.replicas)}")
    return 0


def cmd_local_stop(args: argparse.Namespace) -> int:
    was_running = _cluster(args).stop(args.node)
    print(f"{args.node} {'stopped' if was_running else 'was not running'}")
    return 0


def cmd_local_restart(args: argparse.Namespace) -> int:
    n = _cluster(args).restart(args.node, stop_first=True)
    print(f"{n.id} {n.address} pid={n.pid} log={n.log}")
    return 0


def cmd_local_rotate_ca(args: argparse.Namespace) -> int:
    from storage_node.cli.local_ca_rotation import rotate_ca

    cluster = _cluster(args)
    if not cluster.running():
        raise UsageError(f"no node of {args.data_dir} runs; start it with 'msgstore local up'")
    new = rotate_ca(cluster, args.timeout)
    print(f"new CA: {new.cert.subject.rfc4514_string()} in {cluster.ca_file}")
    return 0


def register_local(sub: Any) -> None:
    p = sub.add_parser(
        "local",
        help="a local multi-node cluster on 127.0.0.1",
        description="Node processes on loopback sharing one routing table, kept in a data "
        "directory (ports, too: addresses stay the same across down/up).",
    )
    lsub = p.add_subparsers(dest="local_command", required=True)
    data_dir = argparse.ArgumentParser(add_help=False)
    data_dir.add_argument(
        "--data-dir",
        default=os.environ.get("MSGSTORE_LOCAL_DIR"),
        required=not os.environ.get("MSGSTORE_LOCAL_DIR"),
        help="the cluster's directory (env MSGSTORE_LOCAL_DIR)",
    )
    up = lsub.add_parser(
        "up", parents=[data_dir], help="start N nodes in the background; returns once ready"
    )
    up.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
    up.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="ports P, P+1, ... (default: the last run's ports, else free ones)",
    )
    up.add_argument(
        "--token", default=os.environ.get("MSGSTORE_TOKEN"), help="require this bearer token"
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with certificates of a CA generated in DATA_DIR/tls (kept across runs)",
    )
    up.add_argument(
        "--replication-factor",
        type=int,
        default=1,
        help="copies of every node's log, 1-3 (default 1); above 1 a controller fails "
        "lost leaders over (docs/REPLICATION.md)",
    )
    up.add_argument(
        "--min-in-sync",
        type=int,
        default=None,
        help="copies a sync append waits for (default 2 with factor 3, else the factor)",
    )
    up.add_argument(
        "--no-console",
        dest="console",
        action="store_false",
        help="start no web console (by default one starts: 'msgstore console', docs/CONSOLE.md)",
    )
    up.add_argument(
        "--console-admin",
        action="store_true",
        help="start the console with --admin (group offset resets; the token decides)",
    )
    up.set_defaults(func=cmd_local_up)
    down = lsub.add_parser("down", parents=[data_dir], help="stop every node cleanly")
    down.set_defaults(func=cmd_local_down)
    status = lsub.add_parser(
        "status",
        parents=[data_dir],
        help="each node's state (running, stopped, crashed), PID, address and health; "
        "the controller and each replicated log's leader and epoch",
    )
    status.set_defaults(func=cmd_local_status)
    stop = lsub.add_parser("stop", parents=[data_dir], help="stop one node cleanly")
    stop.add_argument("node", help="node id, e.g. node-1")
    stop.set_defaults(func=cmd_local_stop)
    restart = lsub.add_parser(
        "restart", parents=[data_dir], help="(re)start one node on its port and data"
    )
    restart.add_argument("node", help="node id, e.g. node-1")
    restart.set_defaults(func=cmd_local_restart)
    rotate = lsub.add_parser(
        "rotate-ca",
        parents=[data_dir],
        help="replace the CA of a running TLS cluster without restarting a node: trust the "
        "new CA beside the old, reissue every certificate, retire the old CA",
    )
    rotate.add_argument(
        "--timeout", type=float, default=120.0, help="seconds each step may take (default 120)"
    )
    rotate.set_defaults(func=cmd_local_rotate_ca)
