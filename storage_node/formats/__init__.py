"""Layer 2: one module per on-disk file kind; each writes, reads, verifies and rebuilds itself.

The pure compaction functions are re-exported here so Spark executors can run the engine's
own format code on bytes fetched from a node.
"""

from storage_node.formats.compressed import compact_segment_bytes, verify_compacted_segment
from storage_node.formats.key_index_compacted import (
    compact_key_index_bytes,
    verify_compacted_key_index,
)

__all__ = [
    "compact_key_index_bytes",
    "compact_segment_bytes",
    "verify_compacted_key_index",
    "verify_compacted_segment",
]
