"""Offset ranges: the unit of parallel reading, and how a range is read from its owner."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from msgstore_spark.arrow_codec import columns_to_batch
from msgstore_spark.cluster import connect
from msgstore_spark.errors import explained
from msgstore_spark.options import ConnectionOptions

MAX_PAGE_BYTES = 64 * 1024 * 1024


@dataclass
class OffsetRange(InputPartition):
    """Offsets [start, end) of one partition of one topic: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int


def split_range(topic: str, partition: int, start: int, end: int, size: int) -> list[OffsetRange]:
    return [
        OffsetRange(topic, partition, lo, min(lo + size, end)) for lo in range(start, end, size)
    ]


def read_range(
    conn: ConnectionOptions, rng: OffsetRange, fetch_size: int, tag: str | None
) -> Iterator[pa.RecordBatch]:
    """Page through the range on the partition's owner (the client follows 421 answers),
    in the binary read framing, each page straight into one RecordBatch."""
    client = connect(conn)
    offset = rng.start
    try:
        while offset < rng.end:
            with explained(conn.endpoints, rng.topic):
                cols = client.read_columns(
                    rng.topic,
                    rng.partition,
                    offset,
                    max_messages=min(fetch_size, rng.end - offset),
                    max_bytes=MAX_PAGE_BYTES,
                    tag=tag,
                )
            # offsets rise within a partition: rows past the range's end are a tail to cut
            keep = int(np.searchsorted(cols.offsets, rng.end))
            if keep:
                yield columns_to_batch(rng.topic, cols, keep)
            next_offset = -1 if cols.next_offset is None else cols.next_offset
            if next_offset <= offset:
                break  # the partition ends before the range does (it cannot shrink otherwise)
            offset = next_offset
    finally:
        client.close()
