"""Spark ingest and read through msgstore vs Parquet on local disk.

Same DataFrame, same session, same run: a local 3-node cluster on loopback and a Parquet
directory on local disk. Prints JSON lines with ``rows_per_s`` (median of the repeats) and
``ratio_vs_parquet``: ``spark_ingest`` (``format("msgstore")`` writes), ``spark_read`` and
``spark_read_key_value`` (``msgstore_spark.load``, the JVM reader), and
``spark_read_python_source`` (the same read through the Python data source,
``format("msgstore")``). Each read's DataFrame is made once and scanned whole into Spark's
``noop`` sink, as the Parquet DataFrame is.

Two more lines put the reads in context. ``spark_read_python_floor``: a Python data source
with the msgstore schema whose tasks yield the same number of rows from Arrow batches
already in the worker's memory (no node, no network): what any Python data source costs
Spark on this machine. ``spark_small_read``: seconds per query for one row of each partition
through ``load`` (its planning included), and for one row of the Parquet copy.

``spark_read`` materialises every column msgstore gives (topic, partition, offset, key,
value, tag, msg_id, timestamp: eight) against the Parquet copy's two (key, value).
``spark_read_key_value`` selects key and value on both sides; the JVM reader fills only
those columns (column pruning), Parquet reads only those two.

    .venv/bin/python bench/spark.py [--rows 200000] [--repeats 3] [--value-bytes 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import msgstore_spark  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from msgstore_spark.arrow_codec import READ_SCHEMA, READ_SCHEMA_DDL  # noqa: E402
from msgstore_spark.session import with_msgstore_settings  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

from storage_node.cli.local import LocalCluster  # noqa: E402
from storage_node.client import Client  # noqa: E402


def floor_batches(rows: int, value_bytes: int) -> Iterator[pa.RecordBatch]:
    """``rows`` rows of READ_SCHEMA in 10,000-row batches, each column made by one C call."""
    for lo in range(0, rows, 10_000):
        n = min(10_000, rows - lo)
        ids = pa.array(np.arange(lo, lo + n, dtype=np.int64))
        keys = pc.binary_join_element_wise("k-", pc.cast(ids, pa.string()), "")
        value_offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * value_bytes).tobytes())
        values = pa.Array.from_buffers(
            pa.binary(), n, [None, value_offsets, pa.py_buffer(b"x" * (n * value_bytes))]
        )
        columns = [
            pa.array(["bench"] * n, pa.string()),
            pa.array(np.zeros(n, dtype=np.int32)),
            ids,
            keys,
            values,
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.string()),
            pc.multiply(ids, 1000).cast(pa.timestamp("us", tz="UTC")),
        ]
        yield pa.RecordBatch.from_arrays(columns, schema=READ_SCHEMA)


class FloorReader(DataSourceReader):
    def __init__(self, rows: int, value_bytes: int, tasks: int) -> None:
        self.rows, self.value_bytes, self.tasks = rows, value_bytes, tasks

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.tasks)]

    def read(self, partition: InputPartition):  # noqa: ANN201
        return floor_batches(self.rows // self.tasks, self.value_bytes)


class FloorSource(DataSource):
    """Rows from memory with the msgstore source's schema: the cost of a Python source."""

    @classmethod
    def name(cls) -> str:
        return "msgstore_bench_floor"

    def schema(self) -> str:
        return READ_SCHEMA_DDL

    def reader(self, schema) -> DataSourceReader:  # noqa: ANN001
        opts = self.options
        return FloorReader(int(opts["rows"]), int(opts["value_bytes"]), int(opts["tasks"]))


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()

    spark = (
        with_msgstore_settings(SparkSession.builder)
        .master(args.master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    msgstore_spark.register(spark)
    pad = "x" * max(0, args.value_bytes - 20)
    df = (
        spark.range(args.rows, numPartitions=2)
        .select(
            F.concat(F.lit("k-"), F.col("id").cast("string")).alias("key"),
            F.concat(F.lit(pad), F.lpad(F.col("id").cast("string"), 20, "0")).alias("value"),
        )
        .cache()
    )
    df.count()

    with tempfile.TemporaryDirectory(prefix="msgstore-bench-spark-") as tmp:
        cluster = LocalCluster(os.path.join(tmp, "cluster"))
        cluster.up(nodes=3)
        try:
            endpoints = ",".join(cluster.addresses)
            with Client(cluster.addresses) as client:
                client.create_topic("bench", args.partitions)

            def write_msgstore() -> None:
                (
                    df.write.format("msgstore")
                    .option("endpoints", endpoints)
                    .option("topic", "bench")
                    .mode("append")
                    .save()
                )

            def write_parquet(i: int) -> None:
                df.write.mode("overwrite").parquet(os.path.join(tmp, f"parquet-{i}"))

            # warm both paths (JVM, Python workers) before measuring
            write_parquet(-1)
            write_msgstore()
            ms_times, pq_times = [], []
            for i in range(args.repeats):
                pq_times.append(timed(lambda i=i: write_parquet(i)))
                ms_times.append(timed(write_msgstore))
            ms_rate = args.rows / statistics.median(ms_times)
            pq_rate = args.rows / statistics.median(pq_times)
            print(
                json.dumps(
                    {
                        "bench": "spark_ingest",
                        "rows": args.rows,
                        "value_bytes": args.value_bytes,
                        "rows_per_s": round(ms_rate),
                        "parquet_rows_per_s": round(pq_rate),
                        "ratio_vs_parquet": round(ms_rate / pq_rate, 3),
                        "seconds": [round(t, 3) for t in ms_times],
                        "parquet_seconds": [round(t, 3) for t in pq_times],
                    }
                ),
                flush=True,
            )

            # reads: the first write's rows (offsets 0..rows) vs one Parquet copy
            with Client(cluster.addresses) as client:
                info = client.describe_topic("bench")
            total = sum(p["next_offset"] for p in info["partition_offsets"])
            share = args.rows / total
            per_partition = {
                str(p["partition"]): int(p["next_offset"] * share)
                for p in info["partition_offsets"]
            }
            read_options = {
                "endpoints": endpoints,
                "topic": "bench",
                "endingOffsets": json.dumps({"bench": per_partition}),
            }
            rows_read = sum(per_partition.values())
            read_pq = spark.read.parquet(os.path.join(tmp, "parquet-0"))

            def scan(frame) -> None:
                frame.write.format("noop").mode("overwrite").save()

            spark.dataSource.register(FloorSource)
            floor = (
                spark.read.format("msgstore_bench_floor")
                .option("rows", str(rows_read))
                .option("value_bytes", str(args.value_bytes))
                .option("tasks", "2")  # as many as the Python source's read (two cores)
            )
            for name, columns, load in (
                ("spark_read", None, lambda: msgstore_spark.load(spark, **read_options)),
                (
                    "spark_read_key_value",
                    ("key", "value"),
                    lambda: msgstore_spark.load(spark, **read_options),
                ),
                (
                    "spark_read_python_source",
                    None,
                    lambda: spark.read.format("msgstore").options(**read_options).load(),
                ),
                ("spark_read_python_floor", None, floor.load),
            ):
                # each side's DataFrame is made once (its planning, file listing or offset
                # ranges, is not timed) and scanned as a whole
                ms_frame = load() if columns is None else load().select(*columns)
                pq_frame = read_pq if columns is None else read_pq.select(*columns)
                scan(ms_frame)
                scan(pq_frame)
                ms_times, pq_times = [], []
                for _ in range(args.repeats):
                    pq_times.append(timed(lambda pq_frame=pq_frame: scan(pq_frame)))
                    ms_times.append(timed(lambda ms_frame=ms_frame: scan(ms_frame)))
                ms_rate = rows_read / statistics.median(ms_times)
                pq_rate = args.rows / statistics.median(pq_times)
                print(
                    json.dumps(
                        {
                            "bench": name,
                            "rows": rows_read,
                            "columns": list(columns) if columns else "all",
                            "rows_per_s": round(ms_rate),
                            "parquet_rows_per_s": round(pq_rate),
                            "ratio_vs_parquet": round(ms_rate / pq_rate, 3),
                            "seconds": [round(t, 3) for t in ms_times],
                            "parquet_seconds": [round(t, 3) for t in pq_times],
                        }
                    ),
                    flush=True,
                )

            one_each = json.dumps({"bench": {p: 1 for p in per_partition}})
            small_options = {**read_options, "endingOffsets": one_each}
            small_pq = read_pq.limit(1)
            scan(msgstore_spark.load(spark, **small_options))
            scan(small_pq)
            ms_times, pq_times = [], []
            for _ in range(max(args.repeats, 5)):
                pq_times.append(timed(lambda: scan(small_pq)))
                ms_times.append(timed(lambda: scan(msgstore_spark.load(spark, **small_options))))
            print(
                json.dumps(
                    {
                        "bench": "spark_small_read",
                        "rows": len(per_partition),
                        "seconds_median": round(statistics.median(ms_times), 3),
                        "parquet_one_row_seconds_median": round(statistics.median(pq_times), 3),
                        "seconds": [round(t, 3) for t in ms_times],
                        "parquet_seconds": [round(t, 3) for t in pq_times],
                    }
                ),
                flush=True,
            )
        finally:
            cluster.down()
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
