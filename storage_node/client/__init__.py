"""Python clients of a msgstore cluster: ``Client`` (blocking) and ``AsyncClient`` (asyncio).

Both read the routing table from any node, send each partition's messages to its owner in
binary batches, retry with the same (producer id, sequence) so resends never duplicate,
and follow ``421`` answers to the owning node. ``read_columns`` / ``lookup_key_columns``
fetch pages in the binary read framing as numpy columns (``ReadColumns``); ``fetch`` reads
several partitions in one request and ``consumer`` iterates pages with the next one fetched
ahead (``Consumer``, or ``AsyncConsumer`` with ``async for``). Both clients run the same operations (``core``); only the transport differs.
"""

from storage_node.client.async_client import AsyncClient
from storage_node.client.common import Forbidden, OutMessage, TlsError, Unauthenticated
from storage_node.client.consumer import AsyncConsumer, Consumer
from storage_node.client.core import Produced, RawAnswer
from storage_node.client.fetch import FetchAnswer
from storage_node.client.sync_client import Client
from storage_node.wire.batch_codec import ReadColumns

__all__ = [
    "AsyncClient",
    "AsyncConsumer",
    "Client",
    "Consumer",
    "FetchAnswer",
    "Forbidden",
    "OutMessage",
    "Produced",
    "RawAnswer",
    "ReadColumns",
    "TlsError",
    "Unauthenticated",
]
