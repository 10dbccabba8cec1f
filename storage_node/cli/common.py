"""What every ``msgstore`` subcommand shares: the connection options, the client made from
them, JSON output, usage errors, and a quiet stdout once the reader of the output has gone
away."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, NoReturn

from storage_node.errors import InvalidArgument

DEFAULT_ENDPOINT = "http://127.0.0.1:7100"
USAGE_EXIT = 2  # argparse's status for a wrong command line; the CLI's own checks use it too


class UsageError(InvalidArgument):
    """The command line itself is wrong (a flag, a combination of flags, a path given as an
    option): nothing was asked of a cluster. Exit status 2, as argparse's errors."""

    code = "usage"


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's one error format: ``error: usage: WHAT (see 'PROG --help')``
    on one line, exit status 2 (argparse's own status for a wrong command line)."""

    def error(self, message: str) -> NoReturn:
        print(f"error: usage: {message} (see '{self.prog} --help')", file=sys.stderr)
        sys.exit(USAGE_EXIT)


def print_json(doc: Any) -> None:
    json.dump(doc, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def connection_parent(
    endpoint: str | None = DEFAULT_ENDPOINT,
    token_env: str = "MSGSTORE_TOKEN",
    token_help: str = "bearer token",
) -> argparse.ArgumentParser:
    """The options of every command that talks to a cluster (endpoint, token, CA). The
    console takes them too, with no default ``endpoint`` (it must be told the cluster) and a
    token of its own read from ``token_env``."""
    default = "; default %(default)s" if endpoint else ""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--endpoint",
        default=os.environ.get("MSGSTORE_ENDPOINT", endpoint),
        help="nodes of the cluster, comma-separated; the next is tried when one is down "
        f"(env MSGSTORE_ENDPOINT{default})",
    )
    parent.add_argument(
        "--token",
        default=os.environ.get(token_env),
        help=f"{token_help} (env {token_env})",
    )
    parent.add_argument(
        "--ca",
        default=os.environ.get("MSGSTORE_CA"),
        help="CA certificate (PEM) the nodes' TLS certificates must verify against; "
        "then every address must be https (env MSGSTORE_CA)",
    )
    return parent


def topic_command(
    sub: Any, parent: argparse.ArgumentParser, name: str, summary: str, doc: str | None, topic: str
) -> argparse.ArgumentParser:
    """The parser of a subcommand that streams one topic (``produce``, ``consume``): the
    connection options, ``summary`` in the command list, its module's ``doc`` as the
    description (kept as written) and the topic argument, ``topic`` saying what it is for."""
    p = sub.add_parser(
        name,
        parents=[parent],
        help=summary,
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("topic", help=topic)
    return p


def client_of(args: argparse.Namespace) -> Any:
    """The blocking client for the connection options in ``args`` (imported on use: the
    commands that need no cluster do not pay for it). Besides the given endpoints it knows
    the nodes of the local cluster in MSGSTORE_LOCAL_DIR, tried when the given ones are down."""
    from storage_node.cli.endpoints import endpoints_to_try
    from storage_node.client import Client

    return Client(endpoints_to_try(args.endpoint), token=args.token, ca=getattr(args, "ca", None))


def silence_stdout() -> None:
    """After EPIPE on stdout: point it at /dev/null so the interpreter's exit flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
