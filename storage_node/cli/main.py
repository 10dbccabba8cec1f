"""The ``msgstore`` command line: run a node, a local cluster, and talk to a cluster.

Subcommands register themselves through ``register_*(subparsers, parent)`` functions, each
imported directly: a broken module fails loudly instead of hiding its commands. ``produce``,
``consume`` and ``spark-job`` (whose modules load the client or the operator) are registered
in full only when they are the command given; otherwise by name and summary, so
``--version``, ``--help`` and the other commands start without those imports.

Exit status: 0 done (also when the reader of the output went away, as ``consume | head``);
1 an error (``error: CODE: message``); 2 a wrong command line (``error: usage: ...``); 130
Ctrl-C. docs/CLI.md says the same and its examples are run by a test.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from storage_node.cli.common import (
    USAGE_EXIT,
    Parser,
    UsageError,
    client_of,
    connection_parent,
    print_json,
    silence_stdout,
)
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
    from storage_node.cli.consume import compile_format

    render = compile_format(args.format)
    with client_of(args) as client:
        doc = client.lookup_key(args.topic, args.key, args.begin, args.end, args.max)
        out = sys.stdout.buffer
        for message in doc["messages"]:
            out.write(render({"topic": args.topic, **message}))
        out.flush()
        if doc.get("limit_reached"):
            print(f"(more than {args.max} matches; raise --max)", file=sys.stderr)
    if doc.get("unreachable_nodes"):  # a partial answer says so, as consume does
        nodes = ", ".join(doc["unreachable_nodes"])
        print(
            f"error: incomplete: {nodes} did not answer: their matches are missing", file=sys.stderr
        )
        return 1
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


# commands whose modules load much (the client: numpy, pyarrow; spark-job: the operator's
# Kubernetes builders): (module, register function, summary)
LAZY_COMMANDS = {
    "produce": (
        "storage_node.cli.produce",
        "register_produce",
        "send lines from stdin or a file, one message per line",
    ),
    "consume": (
        "storage_node.cli.consume",
        "register_consume",
        "print messages (JSON lines, raw values or a template)",
    ),
    "spark-job": (
        "storage_node.cli.spark_job",
        "register_spark_job",
        "render Kubernetes Jobs that run msgstore's Spark jobs on a cluster",
    ),
}


def register_lazy(
    sub: Any, parent: argparse.ArgumentParser, command: str | None, full: bool = False
) -> None:
    """The ``LAZY_COMMANDS``: in full when ``command`` is one of them (or ``full``), else
    by name and summary only, which is all ``msgstore --help`` shows of them."""
    import importlib

    for name, (module, register, summary) in LAZY_COMMANDS.items():
        if full or name == command:
            getattr(importlib.import_module(module), register)(sub, parent)
        else:
            sub.add_parser(name, help=summary, add_help=False)


def register_data(sub: Any, parent: argparse.ArgumentParser) -> None:
    """``get``, ``query``, ``cluster``, ``files``, ``compact`` (``produce`` and ``consume``
    are in ``LAZY_COMMANDS``)."""

    g = sub.add_parser("get", parents=[parent], help="a message by its ID")
    g.add_argument("msg_id", help="app-iphex-hour-seq, as produce printed it")
    g.set_defaults(func=cmd_get)

    q = sub.add_parser("query", parents=[parent], help="messages with a key, newest first")
    q.add_argument("topic", help="topic to search")
    q.add_argument("key", help="the exact key")
    q.add_argument("--begin", type=int, default=0, help="store time from (ms)")
    q.add_argument("--end", type=int, default=None, help="store time to (ms)")
    q.add_argument("--max", type=int, default=32, help="at most this many (default 32)")
    q.add_argument(
        "--format",
        default="json",
        metavar="FMT",
        help="json (default), raw (the value) or a template, as 'msgstore consume --format'",
    )
    q.set_defaults(func=cmd_query)

    for name, func, text in (
        ("cluster", cmd_cluster, "the routing table"),
        ("files", cmd_files, "every node's files and their states"),
        ("compact", cmd_compact, "seal and compact now on every node"),
    ):
        s = sub.add_parser(name, parents=[parent], help=text)
        s.set_defaults(func=func)


def build_parser(command: str | None = None, full: bool = False) -> argparse.ArgumentParser:
    """The parser for a command line whose command is ``command``: the commands of
    ``LAZY_COMMANDS`` are registered in full only when given (or with ``full``)."""
    from storage_node import __version__

    parser = Parser(prog="msgstore", description="msgstore message store")
    parser.add_argument(
        "--version",
        action="version",
        version=f"msgstore {__version__}",
        help="print the version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    parent = connection_parent()
    register_serve(sub)
    from storage_node.cli.local_commands import register_local

    register_local(sub)
    register_topic(sub, parent)
    register_data(sub, parent)
    from storage_node.cli.admin import register_group

    register_group(sub, parent)
    from storage_node.cli.access import register_access

    register_access(sub, parent)
    from storage_node.cli.console_cmd import register_console

    register_console(sub)
    register_lazy(sub, parent, command, full)
    return parser


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
    parser = build_parser(first)
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed output shows here, not at the interpreter's exit
        return code
    except UsageError as err:
        print(f"error: usage: {err.message}", file=sys.stderr)
        return USAGE_EXIT
    except MsgStoreError as err:
        from storage_node.cli.endpoints import with_local_paths

        print(f"error: {err.code}: {with_local_paths(err.message)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (``| head``): what it read is all it wanted, as for consume
        silence_stdout()
        return 0
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
