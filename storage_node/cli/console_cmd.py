"""``msgstore console``: the web console as a process of its own, a client of the cluster
(docs/CONSOLE.md)."""

from __future__ import annotations

import argparse
from typing import Any

from storage_node.cli.common import UsageError, connection_parent


def cmd_console(args: argparse.Namespace) -> int:
    from storage_node.client.common import normalize_endpoints, resolve_ca
    from storage_node.console.serve import run
    from storage_node.console.settings import ConsoleSettings

    if not (args.endpoint or "").strip(","):
        raise UsageError("give the cluster with --endpoint URL[,URL] (or MSGSTORE_ENDPOINT)")
    ca = resolve_ca(args.ca or None)  # a missing or non-PEM file is refused here
    endpoints = tuple(normalize_endpoints(args.endpoint.split(","), tls=ca is not None))
    bad = [e for e in endpoints if not e.startswith(("http://", "https://"))]
    if bad:
        raise UsageError(f"--endpoint takes http:// or https:// node addresses, not {bad[0]}")
    if bool(args.cert) != bool(args.key):
        raise UsageError("--cert and --key go together (the console's own HTTPS)")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
    run(
        ConsoleSettings(
            endpoints=endpoints,
            token=args.token or None,
            ca=ca,
            admin=args.admin,
            host=args.host,
            port=args.port,
            cert=args.cert or None,
            key=args.key or None,
            scrape_seconds=args.scrape_seconds,
        )
    )
    return 0


def register_console(sub: Any) -> None:
    connection = connection_parent(
        endpoint=None,
        token_env="MSGSTORE_CONSOLE_TOKEN",
        token_help="the console's own token, for the routing table and metrics it reads in "
        "the background; never used for a user's page",
    )
    p = sub.add_parser(
        "console",
        parents=[connection],
        help="serve the web console: pages over the cluster's HTTP API",
        description="A web console for the cluster (docs/CONSOLE.md): users log in with "
        "their own token, which every page sends to the nodes.",
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="listen port (default 8080; 0: any)")
    p.add_argument(
        "--admin",
        action="store_true",
        help="offer group offset resets (done with the user's token: the cluster decides)",
    )
    p.add_argument("--cert", help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--key", help="the certificate's private key (PEM)")
    p.add_argument(
        "--scrape-seconds",
        type=float,
        default=10.0,
        help="how often the nodes' metrics are read for the charts (default 10)",
    )
    p.set_defaults(func=cmd_console)
