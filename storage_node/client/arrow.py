"""Read pages as Arrow: ``ReadColumns`` (the binary read answer) to a ``pa.RecordBatch``.

Offsets are a numpy cumsum of the answer's lengths and the data buffers are the answer's
blobs (``pa.Array.from_buffers``), so no Python object is made per message.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from storage_node.wire.read_answer import ReadColumns

READ_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.string()),
        ("value", pa.binary()),
        ("tag", pa.string()),
        ("msg_id", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)


def _varlen_array(
    kind: pa.DataType, lengths: np.ndarray, blob: memoryview | bytes, nullable: bool = True
) -> pa.Array:
    """A string/binary Arrow array over a read answer's blob: offsets are a numpy cumsum of
    the lengths, validity a packed bit mask of ``length >= 0``, the data the blob itself."""
    count = len(lengths)
    offsets = np.zeros(count + 1, dtype=np.int32)
    absent = lengths < 0
    null_count = int(absent.sum()) if nullable else 0
    np.cumsum(np.where(absent, 0, lengths) if null_count else lengths, out=offsets[1:])
    validity = None
    if null_count:
        validity = pa.py_buffer(np.packbits(~absent, bitorder="little"))
    return pa.Array.from_buffers(
        kind,
        count,
        [validity, pa.py_buffer(offsets), pa.py_buffer(blob)],
        null_count=null_count,
    )


def _repeated_string(text: str, count: int) -> pa.Array:
    """``count`` copies of one string (the topic column) without a Python list."""
    raw = text.encode("utf-8")
    offsets = np.arange(count + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)]
    )


def columns_to_batch(topic: str, cols: ReadColumns, limit: int | None = None) -> pa.RecordBatch:
    """A binary read answer as a RecordBatch of READ_SCHEMA with no Python object per row.

    ``limit`` keeps only the first rows (a page may run past the end of an offset range).
    The decoder already checked lengths, sizes and UTF-8, so the arrays are built unchecked.
    """
    count = len(cols) if limit is None else min(limit, len(cols))
    if count < len(cols):
        cols = _head(cols, count)
    columns = [
        _repeated_string(topic, count),
        pa.array(cols.partitions.astype(np.int32, copy=False)),
        pa.array(cols.offsets.astype(np.int64, copy=False)),
        _varlen_array(pa.string(), cols.key_lengths, cols.keys),
        _varlen_array(pa.binary(), cols.value_lengths, cols.values, nullable=False),
        _varlen_array(pa.string(), cols.tag_lengths, cols.tags),
        _varlen_array(pa.string(), cols.msg_id_lengths, cols.msg_ids),
        pa.array(cols.timestamps * 1000, pa.timestamp("us", tz="UTC")),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=READ_SCHEMA)


def _head(cols: ReadColumns, count: int) -> ReadColumns:
    """The first ``count`` rows: column slices, blobs cut at the summed lengths."""

    def blob_head(blob: memoryview, lengths: np.ndarray) -> memoryview:
        return blob[: int(np.maximum(lengths[:count], 0).sum(dtype=np.int64))]

    return dataclasses.replace(
        cols,
        partitions=cols.partitions[:count],
        offsets=cols.offsets[:count],
        timestamps=cols.timestamps[:count],
        store_timestamps=cols.store_timestamps[:count],
        key_lengths=cols.key_lengths[:count],
        tag_lengths=cols.tag_lengths[:count],
        msg_id_lengths=cols.msg_id_lengths[:count],
        value_lengths=cols.value_lengths[:count],
        keys=blob_head(cols.keys, cols.key_lengths),
        tags=blob_head(cols.tags, cols.tag_lengths),
        msg_ids=blob_head(cols.msg_ids, cols.msg_id_lengths),
        values=blob_head(cols.values, cols.value_lengths),
        header_lengths=None if cols.header_lengths is None else cols.header_lengths[:count],
        headers=None
        if cols.headers is None or cols.header_lengths is None
        else blob_head(cols.headers, cols.header_lengths),
    )
