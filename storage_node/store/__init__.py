"""Layer 3: the segment store service (see docs/ENGINE_API.md)."""

from storage_node.formats.packed import PackedBatch, PackedColumn
from storage_node.formats.partitioning import partition_for_key
from storage_node.store.columnar import ReadBatch
from storage_node.store.config import StoreConfig
from storage_node.store.store import Store
from storage_node.store.types import (
    AppendColumns,
    AppendResult,
    FileInfo,
    LogEnds,
    LookupResult,
    Message,
    MessageIn,
    ReadResult,
    TopicConfig,
)

__all__ = [
    "AppendColumns",
    "AppendResult",
    "FileInfo",
    "LogEnds",
    "LookupResult",
    "Message",
    "MessageIn",
    "PackedBatch",
    "PackedColumn",
    "ReadBatch",
    "ReadResult",
    "Store",
    "StoreConfig",
    "TopicConfig",
    "partition_for_key",
]
