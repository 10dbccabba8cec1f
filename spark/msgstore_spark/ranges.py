"""Offset ranges: the unit of parallel reading, and how a range is read from its owner."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from msgstore_spark.arrow_codec import columns_to_batch
from msgstore_spark.cluster import connect
from msgstore_spark.errors import explained
from msgstore_spark.options import ConnectionOptions
from storage_node.client import ReadColumns

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
    in the binary read framing, each page straight into one RecordBatch.

    The next page is requested before the current one is handed to Spark, so the node reads
    it while Spark takes in this one (one fetch thread, so pages stay in order)."""
    client = connect(conn)
    fetcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="msgstore-read")

    def fetch(offset: int) -> ReadColumns:
        with explained(conn.endpoints, rng.topic):
            return client.read_columns(
                rng.topic,
                rng.partition,
                offset,
                max_messages=min(fetch_size, rng.end - offset),
                max_bytes=MAX_PAGE_BYTES,
                tag=tag,
            )

    offset = rng.start
    pending: Future[ReadColumns] | None = (
        fetcher.submit(fetch, offset) if offset < rng.end else None
    )
    try:
        while pending is not None:
            cols = pending.result()
            next_offset = -1 if cols.next_offset is None else cols.next_offset
            pending = None
            # stop when the range is done or the partition ends first (it cannot shrink)
            if offset < next_offset < rng.end:
                pending = fetcher.submit(fetch, next_offset)
            # offsets rise within a partition: rows past the range's end are a tail to cut
            keep = int(np.searchsorted(cols.offsets, rng.end))
            if keep:
                yield columns_to_batch(rng.topic, cols, keep)
            offset = next_offset
    finally:
        if pending is not None:
            pending.cancel()
        fetcher.shutdown(wait=True)
        client.close()
