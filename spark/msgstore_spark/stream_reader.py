"""Streaming reads: offsets are {topic: {partition: next offset}}, checkpointed by Spark."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from msgstore_spark.cluster import check_spec_partitions, connect, describe_all, resolve_start
from msgstore_spark.errors import OptionError, explained
from msgstore_spark.options import ReadOptions
from msgstore_spark.ranges import OffsetRange, read_task, split_range, tasks_of

Offsets = dict[str, dict[str, int]]


def _cap(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """Share ``max_rows`` over partitions in proportion to their backlog, always progressing."""
    backlog = {
        (t, p): end - start.get(t, {}).get(p, 0)
        for t, parts in latest.items()
        for p, end in parts.items()
    }
    total = sum(v for v in backlog.values() if v > 0)
    if total <= max_rows:
        return latest
    out: Offsets = {t: dict(start.get(t, {})) for t in latest}
    granted = 0
    for (t, p), lag in backlog.items():
        base = start.get(t, {}).get(p, 0)
        share = lag * max_rows // total if lag > 0 else 0
        out[t][p] = base + share
        granted += share
    if granted == 0:  # tiny limit: move the first partition with data by the limit
        for (t, p), lag in backlog.items():
            if lag > 0:
                out[t][p] = start.get(t, {}).get(p, 0) + min(lag, max_rows)
                break
    return out


class MsgStoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.target: Offsets | None = None

    def _current(self) -> Offsets:
        client = connect(self.opts.conn)
        try:
            layout = describe_all(client, self.opts)
        finally:
            client.close()
        return {
            t: {str(s.partition): s.next_offset for s in states} for t, states in layout.items()
        }

    def initialOffset(self) -> dict:
        client = connect(self.opts.conn)
        try:
            layout = describe_all(client, self.opts)
            check_spec_partitions("startingOffsets", self.opts.starting, layout)
            check_spec_partitions("startingTimestamp", self.opts.starting_ts, layout)
            with explained(self.opts.conn.endpoints):
                return {
                    t: {
                        str(s.partition): resolve_start(client, self.opts, s, self.opts.starting)
                        for s in states
                    }
                    for t, states in layout.items()
                }
        finally:
            client.close()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._current()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self.target if self.target is not None else self._current()
        # partitions that appeared since the start are read from their beginning
        merged: Offsets = {
            t: {p: max(end, start.get(t, {}).get(p, 0)) for p, end in parts.items()}
            for t, parts in latest.items()
        }
        if isinstance(limit, ReadMaxRows):
            return _cap(start, merged, limit.max_rows)
        return merged

    def reportLatestOffset(self) -> dict:
        return self._current()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges: list[OffsetRange] = []
        for topic, parts in end.items():
            for p, stop in parts.items():
                begin = start.get(topic, {}).get(p, 0)
                if stop < begin:
                    raise OptionError(
                        "startingOffsets",
                        f"checkpointed offset {begin} of {topic!r} partition {p} is beyond "
                        f"the partition's end {stop}; was the store's data replaced?",
                    )
                ranges.extend(
                    split_range(topic, int(p), begin, stop, self.opts.max_records_per_partition)
                )
        return tasks_of(self.opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: Spark's checkpoint holds the progress."""
