"""The ``msgstore`` command line: run a node, a local cluster, and talk to a cluster.

Subcommands register themselves through ``register_*(subparsers, parent)`` functions, each
imported directly: a broken module fails loudly instead of hiding its commands.

Over 400 lines on purpose: the parser of every subcommand that has no module of its own;
splitting it would scatter ``msgstore --help`` across files.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from storage_node.cli.common import client_of, connection_parent, print_json, silence_stdout
from storage_node.errors import MsgStoreError


# -- serve --------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    from storage_node.server.serve import run
    from storage_node.server.settings import resolve_settings

    flags = {
        "data_dir": args.data_dir,
        "host": args.host,
        "port": args.port,
        "node_id": args.node_id,
        "routing_file": args.routing_file,
        "advertise_address": args.advertise_address,
        "config": args.config,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "kafka_port": args.kafka_port,
    }
    for item in args.set or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise MsgStoreError(f"--set needs NAME=VALUE, got {item!r}")
        flags[name.strip().lower().replace("-", "_")] = value
    settings = resolve_settings(flags)
    return run(settings)


def register_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="run one storage node")
    p.add_argument("--data-dir", help="data directory (env MSGSTORE_DATA_DIR)")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 7100)")
    p.add_argument("--node-id", help="node id as named in the routing table")
    p.add_argument("--routing-file", help="routing table file (docs/ROUTING.md)")
    p.add_argument("--advertise-address", help="URL other nodes and clients use for this node")
    p.add_argument("--config", help="JSON or YAML file of settings (docs/CONFIG.md)")
    p.add_argument("--tls-cert", help="serve HTTPS with this certificate (env MSGSTORE_TLS_CERT)")
    p.add_argument("--tls-key", help="private key of --tls-cert (env MSGSTORE_TLS_KEY)")
    p.add_argument(
        "--kafka-port",
        type=int,
        help="serve the Kafka protocol on this port (env MSGSTORE_KAFKA_PORT; off when unset)",
    )
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="any setting")
    p.set_defaults(func=cmd_serve)


# -- local cluster --------------------------------------------------------------------------
def cmd_local_up(args: argparse.Namespace) -> int:
    from storage_node.cli.local import LocalCluster

    env = {"MSGSTORE_TOKEN": args.token} if args.token else {}
    cluster = LocalCluster(args.data_dir)
    nodes = cluster.up(
        nodes=args.nodes,
        base_port=args.base_port,
        env=env,
        tls=args.tls,
        replication_factor=args.replication_factor,
        min_in_sync=args.min_in_sync,
    )
    for n in nodes:
        print(f"{n.id} {n.address} kafka={cluster.kafka_address(n)} pid={n.pid} log={n.log}")
    print(f"routing table: {cluster.routing_file}")
    if cluster.ca_file:
        print(f"CA certificate: {cluster.ca_file} (use --ca or MSGSTORE_CA)")
    return 0


def cmd_local_down(args: argparse.Namespace) -> int:
    from storage_node.cli.local import LocalCluster

    stopped = LocalCluster(args.data_dir).down()
    print(f"stopped {len(stopped)} node(s): {' '.join(stopped) or '-'}")
    return 0


def cmd_local_status(args: argparse.Namespace) -> int:
    from storage_node.cli.local import LocalCluster

    cluster = LocalCluster(args.data_dir)
    if not cluster.nodes:
        raise MsgStoreError(f"no local cluster in {args.data_dir} (start one with 'local up')")
    print(f"{'NODE':<8} {'PID':>7}  {'ADDRESS':<26} {'KAFKA':<21} HEALTH")
    for n in cluster.nodes:
        running = cluster.is_running(n)
        pid = str(n.pid) if running else "-"
        kafka = cluster.kafka_address(n) or "-"
        print(f"{n.id:<8} {pid:>7}  {n.address:<26} {kafka:<21} {cluster.health(n)}")
    return 0


def cmd_local_stop(args: argparse.Namespace) -> int:
    from storage_node.cli.local import LocalCluster

    cluster = LocalCluster(args.data_dir)
    was_running = cluster.stop(args.node)
    print(f"{args.node} {'stopped' if was_running else 'was not running'}")
    return 0


def cmd_local_restart(args: argparse.Namespace) -> int:
    from storage_node.cli.local import LocalCluster

    cluster = LocalCluster(args.data_dir)
    n = cluster.restart(args.node, stop_first=True)
    print(f"{n.id} {n.address} pid={n.pid} log={n.log}")
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
    up.set_defaults(func=cmd_local_up)
    down = lsub.add_parser("down", parents=[data_dir], help="stop every node cleanly")
    down.set_defaults(func=cmd_local_down)
    status = lsub.add_parser(
        "status", parents=[data_dir], help="each node's PID, address and health"
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


# -- topics and data ------------------------------------------------------------------------
def cmd_topic_create(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        doc = client.create_topic(
            args.name, args.partitions, args.compression, args.retention_hours
        )
    print_json(doc)
    for node, why in sorted((doc.get("skipped_nodes") or {}).items()):
        print(
            f"note: no partition placed on {node}: it is not ready ({why}); "
            f"owners: {', '.join(sorted(set(doc['owners'])))}",
            file=sys.stderr,
        )
    return 0


def cmd_topic_list(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        for t in client.list_topics():
            print(
                f"{t['name']}\tpartitions={t['partitions']}\tcompression={t['compression']}"
                f"\tretention_hours={t['retention_hours']:g}"
            )
    return 0


def cmd_topic_describe(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        doc = client.describe_topic(args.name)
    total = 0
    for part in doc["partition_offsets"]:
        first, nxt = part["first_offset"], part["next_offset"]
        part["messages"] = None if first is None or nxt is None else nxt - first
        total += part["messages"] or 0
    doc["messages"] = total
    print_json(doc)
    if doc.get("unreachable_nodes"):
        print(
            f"note: nodes {', '.join(doc['unreachable_nodes'])} did not answer; "
            "their partitions' offsets are unknown",
            file=sys.stderr,
        )
    return 0


def register_topic(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("topic", help="create, list, describe, delete and alter topics")
    tsub = p.add_subparsers(dest="topic_command", required=True)
    create = tsub.add_parser("create", parents=[parent], help="create a topic")
    create.add_argument("name", help="topic name: 1-200 of A-Z a-z 0-9 . _ -")
    create.add_argument("--partitions", type=int, default=3, help="default 3")
    create.add_argument("--compression", choices=["none", "lz4"], default="lz4", help="default lz4")
    create.add_argument(
        "--retention-hours", type=float, default=168.0, help="keep messages this long (168)"
    )
    create.set_defaults(func=cmd_topic_create)
    lst = tsub.add_parser("list", parents=[parent], help="list topics")
    lst.set_defaults(func=cmd_topic_list)
    desc = tsub.add_parser("describe", parents=[parent], help="partitions, owners, offsets")
    desc.add_argument("name", help="topic name")
    desc.set_defaults(func=cmd_topic_describe)
    from storage_node.cli.admin import register_topic_admin

    register_topic_admin(tsub, parent)


def cmd_get(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        print_json(client.get_message(args.msg_id))
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        doc = client.lookup_key(args.topic, args.key, args.begin, args.end, args.max)
        for message in doc["messages"]:
            print(json.dumps(message, sort_keys=True))
        if doc.get("limit_reached"):
            print(f"(more than {args.max} matches; raise --max)", file=sys.stderr)
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        print_json(client.cluster())
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        print_json(client.files())
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        print_json(client.compact())
    return 0


def register_data(sub: Any, parent: argparse.ArgumentParser) -> None:
    from storage_node.cli.consume import register_consume
    from storage_node.cli.produce import register_produce

    register_produce(sub, parent)
    register_consume(sub, parent)

    g = sub.add_parser("get", parents=[parent], help="a message by its ID")
    g.add_argument("msg_id", help="app-iphex-hour-seq, as produce printed it")
    g.set_defaults(func=cmd_get)

    q = sub.add_parser("query", parents=[parent], help="messages with a key, newest first")
    q.add_argument("topic", help="topic to search")
    q.add_argument("key", help="the exact key")
    q.add_argument("--begin", type=int, default=0, help="store time from (ms)")
    q.add_argument("--end", type=int, default=None, help="store time to (ms)")
    q.add_argument("--max", type=int, default=32, help="at most this many (default 32)")
    q.set_defaults(func=cmd_query)

    for name, func, text in (
        ("cluster", cmd_cluster, "the routing table"),
        ("files", cmd_files, "every node's files and their states"),
        ("compact", cmd_compact, "seal and compact now on every node"),
    ):
        s = sub.add_parser(name, parents=[parent], help=text)
        s.set_defaults(func=func)


CORE_COMMANDS = frozenset(
    {
        "serve",
        "local",
        "topic",
        "group",
        "produce",
        "consume",
        "get",
        "query",
        "cluster",
        "files",
        "compact",
    }
)


def build_parser(with_providers: bool = True) -> argparse.ArgumentParser:
    """The full parser; ``with_providers=False`` skips the commands outside the core ones
    (``spark-job`` renders Kubernetes objects, which a node process or a core command need
    not import)."""
    parser = argparse.ArgumentParser(prog="msgstore", description="msgstore message store")
    parser.add_argument(
        "--version",
        action="version",
        version=f"msgstore {_version()}",
        help="print the version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    parent = connection_parent()
    register_serve(sub)
    register_local(sub)
    register_topic(sub, parent)
    register_data(sub, parent)
    from storage_node.cli.admin import register_group

    register_group(sub, parent)
    if with_providers:
        from storage_node.cli.spark_job import register_spark_job

        register_spark_job(sub, parent)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("msgstore")
    except PackageNotFoundError:
        return "unknown"


def _stdio_utf8() -> None:
    """Print text as UTF-8 whatever the locale says (names and values are UTF-8 data)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(encoding="utf-8", errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    _stdio_utf8()
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(with_providers=first not in CORE_COMMANDS)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MsgStoreError as err:
        print(f"error: {err.code}: {err.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        silence_stdout()
        print("error: output closed before everything was written", file=sys.stderr)
        return 1
    except OSError as exc:  # a busy port, an unreadable file, a full disk...
        print(
            f"error: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""),
            file=sys.stderr,
        )
        return 1
    except Exception as exc:  # noqa: BLE001 - one line instead of a traceback
        if os.environ.get("MSGSTORE_DEBUG"):
            raise
        print(
            f"error: unexpected {type(exc).__name__}: {exc} (MSGSTORE_DEBUG=1 shows where)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
