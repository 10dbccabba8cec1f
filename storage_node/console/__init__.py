"""The web console: server-rendered pages on the node's aiohttp app for the people who
troubleshoot with msgstore (docs/CONSOLE.md). A front end beside the HTTP routes: every
page reaches the stores through the same lookups and partition service they use."""

from storage_node.console.routes import register

__all__ = ["register"]
