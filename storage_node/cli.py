"""The ``msgstore`` command line: run a node, a local cluster, and talk to a cluster.

Subcommands register themselves through ``register(subparsers)`` functions. Other packages
add theirs by listing ``"module:function"`` in SUBCOMMAND_PROVIDERS (a provider that cannot
be imported is skipped, so optional parts never break the core commands).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from storage_node.errors import MsgStoreError

DEFAULT_ENDPOINT = "http://127.0.0.1:7100"
SUBCOMMAND_PROVIDERS: list[str] = [
    "msgstore_spark.cli:register",
    "storage_node.spark_job_cli:register",
]


def _print_json(doc: Any) -> None:
    json.dump(doc, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def _connection_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--endpoint",
        default=os.environ.get("MSGSTORE_ENDPOINT", DEFAULT_ENDPOINT),
        help="any node of the cluster (env MSGSTORE_ENDPOINT; default %(default)s)",
    )
    parent.add_argument(
        "--token",
        default=os.environ.get("MSGSTORE_TOKEN"),
        help="bearer token (env MSGSTORE_TOKEN)",
    )
    parent.add_argument(
        "--ca",
        default=os.environ.get("MSGSTORE_CA"),
        help="CA certificate (PEM) the nodes' TLS certificates must verify against; "
        "then every address must be https (env MSGSTORE_CA)",
    )
    return parent


def _client(args: argparse.Namespace) -> Any:
    from storage_node.client import Client

    return Client(args.endpoint.split(","), token=args.token, ca=getattr(args, "ca", None))


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
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="any setting")
    p.set_defaults(func=cmd_serve)


# -- local cluster --------------------------------------------------------------------------
def cmd_local_up(args: argparse.Namespace) -> int:
    from storage_node.local import LocalCluster

    env = {"MSGSTORE_TOKEN": args.token} if args.token else {}
    cluster = LocalCluster(args.data_dir)
    nodes = cluster.up(nodes=args.nodes, base_port=args.base_port, env=env, tls=args.tls)
    for n in nodes:
        print(f"{n.id} {n.address} pid={n.pid} log={n.log}")
    print(f"routing table: {cluster.routing_file}")
    if cluster.ca_file:
        print(f"CA certificate: {cluster.ca_file} (use --ca or MSGSTORE_CA)")
    return 0


def cmd_local_down(args: argparse.Namespace) -> int:
    from storage_node.local import LocalCluster

    stopped = LocalCluster(args.data_dir).down()
    print(f"stopped {len(stopped)} node(s): {' '.join(stopped) or '-'}")
    return 0


def cmd_local_status(args: argparse.Namespace) -> int:
    from storage_node.local import LocalCluster

    cluster = LocalCluster(args.data_dir)
    running = {n.id for n in cluster.running()}
    for n in cluster.nodes:
        print(f"{n.id} {n.address} {'running' if n.id in running else 'stopped'}")
    return 0


def register_local(sub: Any) -> None:
    p = sub.add_parser("local", help="a local multi-node cluster on 127.0.0.1")
    lsub = p.add_subparsers(dest="local_command", required=True)
    up = lsub.add_parser("up", help="start N nodes in the background; returns once ready")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--data-dir", required=True)
    up.add_argument("--base-port", type=int, default=None, help="ports P, P+1, ... (default: free)")
    up.add_argument("--token", default=os.environ.get("MSGSTORE_TOKEN"))
    up.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with certificates of a CA generated in DATA_DIR/tls (kept across runs)",
    )
    up.set_defaults(func=cmd_local_up)
    down = lsub.add_parser("down", help="stop the nodes cleanly")
    down.add_argument("--data-dir", required=True)
    down.set_defaults(func=cmd_local_down)
    status = lsub.add_parser("status", help="which nodes run")
    status.add_argument("--data-dir", required=True)
    status.set_defaults(func=cmd_local_status)


# -- topics and data ------------------------------------------------------------------------
def cmd_topic_create(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_json(
            client.create_topic(args.name, args.partitions, args.compression, args.retention_hours)
        )
    return 0


def cmd_topic_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for t in client.list_topics():
            print(
                f"{t['name']}\tpartitions={t['partitions']}\tcompression={t['compression']}"
                f"\tretention_hours={t['retention_hours']:g}"
            )
    return 0


def cmd_topic_describe(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_json(client.describe_topic(args.name))
    return 0


def register_topic(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("topic", help="create, list and describe topics")
    tsub = p.add_subparsers(dest="topic_command", required=True)
    create = tsub.add_parser("create", parents=[parent], help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=3)
    create.add_argument("--compression", choices=["none", "lz4"], default="lz4")
    create.add_argument("--retention-hours", type=float, default=168.0)
    create.set_defaults(func=cmd_topic_create)
    lst = tsub.add_parser("list", parents=[parent], help="list topics")
    lst.set_defaults(func=cmd_topic_list)
    desc = tsub.add_parser("describe", parents=[parent], help="partitions, owners, offsets")
    desc.add_argument("name")
    desc.set_defaults(func=cmd_topic_describe)


def json_lines_to_messages(
    lines: TextIO,
    key_field: str | None = None,
    tag_field: str | None = None,
    time_field: str | None = None,
) -> Iterator[dict[str, Any]]:
    """One message per JSON line. A line with 'value'/'value_base64' is a message as the API
    takes it; any other JSON value is the message value itself (fields can feed the key, tag
    and born time)."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as exc:
            raise MsgStoreError(f"line {number} is not JSON: {exc}") from None
        if isinstance(doc, dict) and ("value" in doc or "value_base64" in doc):
            yield doc
            continue
        message: dict[str, Any] = {"value": line.strip()}
        if isinstance(doc, dict):
            if key_field and doc.get(key_field) is not None:
                message["key"] = str(doc[key_field])
            if tag_field and doc.get(tag_field) is not None:
                message["tag"] = str(doc[tag_field])
            if time_field and isinstance(doc.get(time_field), int):
                message["timestamp"] = doc[time_field]
        yield message


def _chunks(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def cmd_produce(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    source = open(args.file, encoding="utf-8") if args.file else sys.stdin  # noqa: SIM115
    total = 0
    try:
        with (
            _client(args) as client,
            tqdm(
                unit="msg", disable=args.quiet, file=sys.stderr, desc=f"produce {args.topic}"
            ) as bar,
        ):
            messages = json_lines_to_messages(
                source, args.key_field, args.tag_field, args.time_field
            )
            for chunk in _chunks(messages, args.batch_size):
                results = client.produce(args.topic, chunk)
                total += len(results)
                bar.update(len(results))
                if args.print_results:
                    for r in results:
                        print(json.dumps(r))
    finally:
        if args.file:
            source.close()
    print(f"produced {total} message(s) to {args.topic}", file=sys.stderr)
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    with _client(args) as client:
        count = 0
        if args.partition is not None:
            stream: Any = client.read_all(args.topic, args.partition, args.offset)
        else:
            stream = client.consume(args.topic, group=args.group)
        for message in stream:
            print(json.dumps(message, sort_keys=True))
            count += 1
            if args.max and count >= args.max:
                break
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_json(client.get_message(args.msg_id))
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    with _client(args) as client:
        doc = client.lookup_key(args.topic, args.key, args.begin, args.end, args.max)
        for message in doc["messages"]:
            print(json.dumps(message, sort_keys=True))
        if doc.get("limit_reached"):
            print(f"(more than {args.max} matches; raise --max)", file=sys.stderr)
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_json(client.cluster())
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_json(client.files())
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_json(client.compact())
    return 0


def register_data(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("produce", parents=[parent], help="send JSON lines from stdin or a file")
    p.add_argument("topic")
    p.add_argument("--file", help="read this file instead of stdin")
    p.add_argument("--batch-size", type=int, default=2000)
    p.add_argument("--key-field", help="take the key from this field of each JSON object")
    p.add_argument("--tag-field", help="take the tag from this field")
    p.add_argument("--time-field", help="take the born time (ms) from this field")
    p.add_argument("--print-results", action="store_true", help="print partition/offset/msg_id")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_produce)

    c = sub.add_parser("consume", parents=[parent], help="print messages as JSON lines")
    c.add_argument("topic")
    c.add_argument("--group", help="resume from and commit this consumer group's offsets")
    c.add_argument("--partition", type=int, help="only this partition")
    c.add_argument("--offset", type=int, help="start offset (with --partition)")
    c.add_argument("--max", type=int, default=0, help="stop after N messages")
    c.set_defaults(func=cmd_consume)

    g = sub.add_parser("get", parents=[parent], help="a message by its ID")
    g.add_argument("msg_id")
    g.set_defaults(func=cmd_get)

    q = sub.add_parser("query", parents=[parent], help="messages with a key, newest first")
    q.add_argument("topic")
    q.add_argument("key")
    q.add_argument("--begin", type=int, default=0, help="store time from (ms)")
    q.add_argument("--end", type=int, default=None, help="store time to (ms)")
    q.add_argument("--max", type=int, default=32)
    q.set_defaults(func=cmd_query)

    for name, func, text in (
        ("cluster", cmd_cluster, "the routing table"),
        ("files", cmd_files, "every node's files and their states"),
        ("compact", cmd_compact, "seal and compact now on every node"),
    ):
        s = sub.add_parser(name, parents=[parent], help=text)
        s.set_defaults(func=func)


CORE_COMMANDS = frozenset(
    {"serve", "local", "topic", "produce", "consume", "get", "query", "cluster", "files", "compact"}
)


def build_parser(with_providers: bool = True) -> argparse.ArgumentParser:
    """The full parser; ``with_providers=False`` skips the optional subcommand packages (they
    may import heavy libraries, which a node process or a core command should not pay for)."""
    parser = argparse.ArgumentParser(prog="msgstore", description="msgstore message store")
    sub = parser.add_subparsers(dest="command", required=True)
    parent = _connection_parent()
    register_serve(sub)
    register_local(sub)
    register_topic(sub, parent)
    register_data(sub, parent)
    for provider in SUBCOMMAND_PROVIDERS if with_providers else []:
        module_name, _, func_name = provider.partition(":")
        try:
            register: Callable[..., None] = getattr(importlib.import_module(module_name), func_name)
        except (ImportError, AttributeError):
            continue
        register(sub, parent)
    return parser


def main(argv: list[str] | None = None) -> int:
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
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
