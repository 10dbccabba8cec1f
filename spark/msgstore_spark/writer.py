"""Batch and streaming writers: driver-side job identity, commit reports, abort reports."""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from msgstore_spark.options import WriteOptions
from msgstore_spark.produce import TaskWriter

log = logging.getLogger("msgstore_spark")


@dataclass
class WriteReport(WriterCommitMessage):
    """What one task wrote (picklable; travels from executor to driver)."""

    producer_id: str
    task_partition: int
    rows: int
    batches: int
    per_partition: dict[int, int] = field(default_factory=dict)
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)


def _write_task(
    opts: WriteOptions, producer_id: str, batches: Iterator[pa.RecordBatch]
) -> WriteReport:
    ctx = TaskContext.get()
    task_partition = ctx.partitionId() if ctx else 0
    writer = TaskWriter(opts, producer_id, rr_start=task_partition)
    report = writer.write(batches)
    return WriteReport(
        producer_id,
        task_partition,
        report.rows,
        report.batches,
        dict(report.per_partition),
        report.offsets,
    )


def summarize(topic: str, messages: list[WriterCommitMessage | None]) -> dict:
    reports = [m for m in messages if isinstance(m, WriteReport)]
    per_partition: Counter = Counter()
    for r in reports:
        per_partition.update(r.per_partition)
    return {
        "topic": topic,
        "rows": sum(r.rows for r in reports),
        "tasks_succeeded": len(reports),
        "tasks_failed": sum(1 for m in messages if m is None),
        "per_partition": {str(p): n for p, n in sorted(per_partition.items())},
    }


def _publish(summary: dict, path: str | None) -> None:
    """Log the summary and, if asked, leave it in a file for the calling program."""
    log.info("msgstore write %s", json.dumps(summary))
    if path:
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(summary, fh)
        os.replace(tmp, path)


class MsgStoreBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, summary_path: str | None) -> None:
        self.opts = opts
        self.job_id = uuid.uuid4().hex[:16]  # fixed on the driver: every attempt shares it
        self.summary_path = summary_path

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        ctx = TaskContext.get()
        producer_id = f"spark-{self.job_id}-p{ctx.partitionId() if ctx else 0}"
        return _write_task(self.opts, producer_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        summary = summarize(self.opts.topic, messages)
        summary.update(job_id=self.job_id, status="committed")
        _publish(summary, self.summary_path)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        summary = summarize(self.opts.topic, messages)
        summary.update(
            job_id=self.job_id,
            status="aborted",
            note=(
                "rows of succeeded tasks are stored; failed tasks may have stored part of "
                f"their rows (producer ids spark-{self.job_id}-p<task>)"
            ),
        )
        _publish(summary, self.summary_path)


class MsgStoreStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch task writes as producer (query id, batch id, task partition)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        ctx = TaskContext.get()
        query = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or "query"
        batch = (ctx.getLocalProperty("streaming.sql.batchId") if ctx else None) or "0"
        part = ctx.partitionId() if ctx else 0
        return _write_task(self.opts, f"stream-{query}-b{batch}-p{part}", iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        summary = summarize(self.opts.topic, messages)
        summary.update(batch_id=batchId, status="committed")
        log.info("msgstore stream write %s", json.dumps(summary))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        summary = summarize(self.opts.topic, messages)
        summary.update(batch_id=batchId, status="aborted")
        log.warning("msgstore stream write %s", json.dumps(summary))
