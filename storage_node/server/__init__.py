"""The node server: an aiohttp HTTP API over one Store (bodies in api_models.py, routes in
openapi.py)."""

from storage_node.server.app import create_app
from storage_node.server.runtime import NodeRuntime
from storage_node.server.settings import NodeSettings, resolve_settings

__all__ = ["NodeRuntime", "NodeSettings", "create_app", "resolve_settings"]
