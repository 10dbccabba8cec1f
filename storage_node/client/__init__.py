"""Python clients of a msgstore cluster: ``Client`` (blocking) and ``AsyncClient`` (asyncio).

Both read the routing table from any node, send each partition's messages to its owner in
binary batches, retry with the same (producer id, sequence) so resends never duplicate,
and follow ``421`` answers to the owning node.
"""

from storage_node.client.async_client import AsyncClient
from storage_node.client.common import Forbidden, OutMessage, Unauthenticated
from storage_node.client.sync_client import Client

__all__ = ["AsyncClient", "Client", "Forbidden", "OutMessage", "Unauthenticated"]
