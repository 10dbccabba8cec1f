"""Batch reads: plan offset ranges per (topic, partition), pack small ones into shared tasks,
read each task's ranges from their owners."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from msgstore_spark.cluster import (
    check_spec_partitions,
    connect,
    describe_all,
    resolve_end,
    resolve_start,
)
from msgstore_spark.errors import OptionError, explained
from msgstore_spark.options import ReadOptions
from msgstore_spark.ranges import (
    OffsetRange,
    TaskRanges,
    freeze_worker_heap,
    read_task,
    split_range,
    tasks_of,
)


def plan_ranges(opts: ReadOptions) -> list[OffsetRange]:
    """Resolve the offset/timestamp options against the cluster (driver side)."""
    client = connect(opts.conn)
    try:
        layout = describe_all(client, opts)
        for name, spec in (
            ("startingOffsets", opts.starting),
            ("endingOffsets", opts.ending),
            ("startingTimestamp", opts.starting_ts),
            ("endingTimestamp", opts.ending_ts),
        ):
            check_spec_partitions(name, spec, layout)
        ranges: list[OffsetRange] = []
        with explained(opts.conn.endpoints):
            for states in layout.values():
                for state in states:
                    start = resolve_start(client, opts, state, opts.starting)
                    end = resolve_end(client, opts, state)
                    if end < start and opts.ending_ts is None and opts.starting_ts is None:
                        raise OptionError(
                            "endingOffsets",
                            f"ends at {end} before the start {start} for {state.topic!r} "
                            f"partition {state.partition}",
                        )
                    ranges.extend(
                        split_range(
                            state.topic,
                            state.partition,
                            start,
                            end,
                            opts.max_records_per_partition,
                            state.owner_address,
                        )
                    )
        return ranges
    finally:
        client.close()


class MsgStoreBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        freeze_worker_heap()  # the planner's Python worker is reused too
        tasks = tasks_of(self.opts, plan_ranges(self.opts))
        # Spark needs at least one partition; an empty task reads nothing
        return tasks or [TaskRanges([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(self.opts, partition)
