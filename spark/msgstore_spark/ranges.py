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
    """Page through the range on the partition's owner with the client's consumer (binary
    read answers, the next page fetched while Spark takes in this one), each page straight
    into one RecordBatch."""
    client = connect(conn)
    try:
        with explained(conn.endpoints, rng.topic):
            consumer = client.consumer(
                rng.topic,
                partitions=[rng.partition],
                offsets={rng.partition: rng.start},
                ends={rng.partition: rng.end},
                page=fetch_size,
                tag=tag,
                max_bytes=MAX_PAGE_BYTES,
            )
            with consumer:
                for cols in consumer:
                    # offsets rise within a partition: rows past the range's end are cut
                    keep = int(np.searchsorted(cols.offsets, rng.end))
                    if keep:
                        yield columns_to_batch(rng.topic, cols, keep)
    finally:
        client.close()
