"""Offset ranges: the unit of parallel reading, how small ones share a task, and how a
task's ranges are read from their owners."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from msgstore_spark.arrow_codec import columns_to_batch
from msgstore_spark.cluster import connect
from msgstore_spark.errors import explained
from msgstore_spark.options import ConnectionOptions, ReadOptions

MAX_PAGE_BYTES = 64 * 1024 * 1024


@dataclass
class OffsetRange(InputPartition):
    """Offsets [start, end) of one partition of one topic (``owner``: its node's address
    when the plan was made, where the JVM reader asks first)."""

    topic: str
    partition: int
    start: int
    end: int
    owner: str | None = None


@dataclass
class TaskRanges(InputPartition):
    """The ranges one Spark task reads: one topic, each partition at most once."""

    ranges: list[OffsetRange]


def split_range(
    topic: str, partition: int, start: int, end: int, size: int, owner: str | None = None
) -> list[OffsetRange]:
    return [
        OffsetRange(topic, partition, lo, min(lo + size, end), owner)
        for lo in range(start, end, size)
    ]


def pack_ranges(
    ranges: Sequence[OffsetRange], min_records: int, max_records: int
) -> list[TaskRanges]:
    """Group ranges into tasks: a task takes the next range of its topic while it holds fewer
    than ``min_records`` offsets and stays within ``max_records``. A Spark task of a Python
    data source has a fixed cost (worker hand-off, the JVM's stage work) of roughly reading
    a hundred thousand records, so a topic of many small partitions is read by fewer,
    fuller tasks; empty ranges are dropped."""
    tasks: list[TaskRanges] = []
    current: list[OffsetRange] = []
    held = 0
    for rng in ranges:
        size = rng.end - rng.start
        if size <= 0:
            continue
        fits = (
            current
            and held < min_records
            and held + size <= max_records
            and rng.topic == current[0].topic
            and all(r.partition != rng.partition for r in current)
        )
        if not fits:
            if current:
                tasks.append(TaskRanges(current))
            current, held = [], 0
        current.append(rng)
        held += size
    if current:
        tasks.append(TaskRanges(current))
    return tasks


_frozen = False


def freeze_worker_heap() -> None:
    """Once per reused PySpark worker (``SPARK_REUSE_WORKER``, which Spark sets for its
    Python workers): move what the imports made (pyarrow, pandas, PySpark, this package) out
    of the collector's reach. Such a worker runs ``gc.collect()`` after every task, and over
    that heap it took tens of milliseconds of a two-core machine, in the way of the next task;
    what a task allocates later is still collected as usual. Elsewhere it does nothing."""
    global _frozen
    if not _frozen and os.environ.get("SPARK_REUSE_WORKER"):
        _frozen = True
        gc.freeze()


def read_ranges(
    conn: ConnectionOptions, task: TaskRanges, fetch_size: int, tag: str | None
) -> Iterator[pa.RecordBatch]:
    """Page through the task's ranges with the client's consumer: one fetch asks every
    owning node at once for the next page of each of its partitions (binary read answers,
    the next fetch on the wire while Spark takes in this one), each page straight into one
    RecordBatch."""
    if not task.ranges:
        return
    topic = task.ranges[0].topic
    ends = {r.partition: r.end for r in task.ranges}
    client = connect(conn)
    try:
        with explained(conn.endpoints, topic):
            consumer = client.consumer(
                topic,
                partitions=list(ends),
                offsets={r.partition: r.start for r in task.ranges},
                ends=ends,
                page=fetch_size,
                tag=tag,
                max_bytes=MAX_PAGE_BYTES,
            )
            with consumer:
                for cols in consumer:
                    # offsets rise within a partition: rows past the range's end are cut
                    keep = int(np.searchsorted(cols.offsets, ends[int(cols.partitions[0])]))
                    if keep:
                        yield columns_to_batch(topic, cols, keep)
    finally:
        client.close()


def tasks_of(opts: ReadOptions, ranges: Sequence[OffsetRange]) -> list[TaskRanges]:
    """The read tasks of planned ranges under the read options."""
    return pack_ranges(ranges, opts.min_records_per_task, opts.max_records_per_partition)


def read_task(opts: ReadOptions, task: InputPartition) -> Iterator[pa.RecordBatch]:
    """What a reader's ``read`` does on an executor with one of its tasks."""
    assert isinstance(task, TaskRanges)
    freeze_worker_heap()
    return read_ranges(opts.conn, task, opts.fetch_size, opts.tag)


def read_range(
    conn: ConnectionOptions, rng: OffsetRange, fetch_size: int, tag: str | None
) -> Iterator[pa.RecordBatch]:
    """One range read on its own (``read_ranges`` of a task holding only it)."""
    if rng.end <= rng.start:
        return iter(())
    return read_ranges(conn, TaskRanges([rng]), fetch_size, tag)
