"""Arrow <-> msgstore conversions: read pages into RecordBatches, RecordBatches into frames.

The read path turns the node's binary read answer (numpy columns and blobs) into Arrow
arrays with ``pa.Array.from_buffers``: offsets are a cumsum of the lengths, the data buffer
is the answer's blob, so no Python object is made per message either way.

The write path builds the node's binary batch frame (``application/x-msgstore-batch``, the
layout of ``storage_node.wire.batch_codec``) straight from Arrow buffers: lengths are a
numpy diff of the Arrow offsets and each blob is one slice, so no Python object is made
per message.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage_node.client.arrow import READ_SCHEMA, columns_to_batch
from storage_node.wire.batch_codec import HEADER, MAGIC

__all__ = [
    "READ_SCHEMA",
    "READ_SCHEMA_DDL",
    "columns_to_batch",
    "encode_frame",
    "messages_to_batch",
]

READ_SCHEMA_DDL = (
    "topic string, partition int, offset long, key string, value binary, "
    "tag string, msg_id string, timestamp timestamp"
)


def _values(messages: Sequence[dict[str, Any]]) -> pa.Array:
    texts = [m.get("value") for m in messages]
    if all(t is not None for t in texts):
        return pa.array(texts, pa.string()).cast(pa.binary())
    return pa.array(
        [
            m["value"].encode("utf-8")
            if m.get("value") is not None
            else base64.b64decode(m["value_base64"])
            for m in messages
        ],
        pa.binary(),
    )


def messages_to_batch(
    topic: str, partition: int, messages: Sequence[dict[str, Any]]
) -> pa.RecordBatch:
    """One page of the node's JSON read answer as a RecordBatch of READ_SCHEMA."""
    n = len(messages)
    stamps = np.fromiter((m["timestamp"] for m in messages), dtype=np.int64, count=n) * 1000
    columns = [
        pa.array([topic] * n, pa.string()),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(np.fromiter((m["offset"] for m in messages), dtype=np.int64, count=n)),
        pa.array([m.get("key") for m in messages], pa.string()),
        _values(messages),
        pa.array([m.get("tag") for m in messages], pa.string()),
        pa.array([m.get("msg_id") for m in messages], pa.string()),
        pa.array(stamps, pa.timestamp("us", tz="UTC")),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=READ_SCHEMA)


def binary_column(arr: pa.Array | None, count: int) -> tuple[np.ndarray, bytes]:
    """(lengths with -1 for null, concatenated bytes) of a string/binary Arrow array."""
    if arr is None:
        return np.full(count, -1, dtype="<i4"), b""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
    nulls = arr.null_count
    valid = None
    if nulls:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        arr = pc.fill_null(arr, pa.scalar(b"", arr.type))
    width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    bufs = arr.buffers()
    offsets = np.frombuffer(
        bufs[1], dtype=width, count=len(arr) + 1, offset=arr.offset * np.dtype(width).itemsize
    )
    lengths = np.diff(offsets).astype("<i4")
    if valid is not None:
        lengths[~valid] = -1
    start, end = int(offsets[0]), int(offsets[-1])
    blob = b""
    if bufs[2] is not None and end > start:
        blob = memoryview(bufs[2])[start:end].tobytes()
    return lengths, blob


def encode_frame(
    values: pa.Array,
    keys: pa.Array | None,
    tags: pa.Array | None,
    msg_ids: pa.Array | None,
    timestamps_ms: np.ndarray,
    partitions: np.ndarray,
    producer_id: str,
    sequence: int,
) -> bytes:
    """The binary batch frame of these columns (timestamps -1 = not given)."""
    count = len(values)
    pid = producer_id.encode("utf-8")
    key_lens, key_blob = binary_column(keys, count)
    tag_lens, tag_blob = binary_column(tags, count)
    id_lens, id_blob = binary_column(msg_ids, count)
    value_lens, value_blob = binary_column(values, count)
    return b"".join(
        (
            HEADER.pack(MAGIC, count, sequence, len(pid), 0),
            pid,
            np.ascontiguousarray(partitions, dtype="<i4").tobytes(),
            np.ascontiguousarray(timestamps_ms, dtype="<i8").tobytes(),
            key_lens.tobytes(),
            tag_lens.tobytes(),
            id_lens.tobytes(),
            value_lens.tobytes(),
            key_blob,
            tag_blob,
            id_blob,
            value_blob,
        )
    )
