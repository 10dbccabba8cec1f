"""Python clients of a msgstore cluster: ``Client`` (blocking) and ``AsyncClient`` (asyncio).

Both read the routing table from any node, send each partition's messages to its owner in
binary batches, retry with the same (producer id, sequence) so resends never duplicate,
and follow ``421`` answers to the owning node. ``read_columns`` / ``lookup_key_columns``
fetch pages in the binary read framing as numpy columns (``ReadColumns``); ``fetch`` reads
several partitions in one request and ``consumer`` iterates pages with the next one fetched
ahead (``Consumer``, or ``AsyncConsumer`` with ``async for``). Both clients run the same operations (``core``); only the transport differs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# where each public name lives; imported on first use, so ``import storage_node.client.X``
# (the CLI's light commands) does not load aiohttp, pyarrow and every client module
_WHERE = {
    "AsyncClient": "storage_node.client.async_client",
    "AsyncConsumer": "storage_node.client.consumer",
    "Client": "storage_node.client.sync_client",
    "Consumer": "storage_node.client.consumer",
    "FetchAnswer": "storage_node.client.fetch",
    "Forbidden": "storage_node.client.common",
    "NotMsgstore": "storage_node.client.steps",
    "OutMessage": "storage_node.client.out_message",
    "Produced": "storage_node.client.produced",
    "RawAnswer": "storage_node.client.steps",
    "ReadColumns": "storage_node.wire.batch_codec",
    "TlsError": "storage_node.client.common",
    "Unauthenticated": "storage_node.client.common",
}
__all__ = [
    "AsyncClient",
    "AsyncConsumer",
    "Client",
    "Consumer",
    "FetchAnswer",
    "Forbidden",
    "NotMsgstore",
    "OutMessage",
    "Produced",
    "RawAnswer",
    "ReadColumns",
    "TlsError",
    "Unauthenticated",
]

if TYPE_CHECKING:
    from storage_node.client.async_client import AsyncClient
    from storage_node.client.common import Forbidden, TlsError, Unauthenticated
    from storage_node.client.consumer import AsyncConsumer, Consumer
    from storage_node.client.fetch import FetchAnswer
    from storage_node.client.out_message import OutMessage
    from storage_node.client.produced import Produced
    from storage_node.client.steps import NotMsgstore, RawAnswer
    from storage_node.client.sync_client import Client
    from storage_node.wire.read_answer import ReadColumns


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
