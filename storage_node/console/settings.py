"""How a console process is started (``msgstore console``): the cluster it is a client of,
where it listens, and whether admin actions (group offset resets) are offered."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConsoleSettings:
    # the cluster: any of its nodes' HTTP addresses (the client follows the routing table)
    endpoints: tuple[str, ...]
    # the console's own token: only for what no user asks for (the routing table and the
    # metrics it scrapes in the background); never used for a user's page
    token: str | None = None
    ca: str | None = None  # CA bundle the nodes' certificates verify against (TLS)
    admin: bool = False  # offer group offset resets (the session's token must allow them)
    host: str = "127.0.0.1"
    port: int = 8080
    cert: str | None = None  # serve HTTPS with this certificate and key
    key: str | None = None
    scrape_seconds: float = 10.0  # how often the nodes' /metrics are read
    history_seconds: float = 3600.0  # how long the charts look back
    timeout: float = 10.0  # each request to a node (seconds): a page never hangs on one
