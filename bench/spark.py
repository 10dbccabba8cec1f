"""Spark ingest and read through the msgstore data source vs Parquet on local disk.

Same DataFrame, same session, same run: a local 3-node cluster on loopback and a Parquet
directory on local disk. Prints JSON lines ``spark_ingest``, ``spark_read`` and
``spark_read_key_value`` with ``rows_per_s`` (median of the repeats) and ``ratio_vs_parquet``.

``spark_read`` materialises every column the msgstore source gives (topic, partition, offset,
key, value, tag, msg_id, timestamp: eight) against the Parquet copy's two (key, value).
``spark_read_key_value`` selects key and value on both sides, so Spark hands on the same
columns from each; the msgstore source still reads whole records from the nodes (a Python
data source gets no column pruning), Parquet reads only those two columns.

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

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import msgstore_spark  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from storage_node.cli.local import LocalCluster  # noqa: E402
from storage_node.client import Client  # noqa: E402


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
        SparkSession.builder.master(args.master)
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
            read_ms = (
                spark.read.format("msgstore")
                .option("endpoints", endpoints)
                .option("topic", "bench")
            )
            per_partition = {}
            with Client(cluster.addresses) as client:
                info = client.describe_topic("bench")
            total = sum(p["next_offset"] for p in info["partition_offsets"])
            share = args.rows / total
            for p in info["partition_offsets"]:
                per_partition[str(p["partition"])] = int(p["next_offset"] * share)
            read_ms = read_ms.option("endingOffsets", json.dumps({"bench": per_partition}))
            rows_read = sum(per_partition.values())
            read_pq = spark.read.parquet(os.path.join(tmp, "parquet-0"))

            def scan(frame) -> None:
                frame.write.format("noop").mode("overwrite").save()

            for name, columns in (("spark_read", None), ("spark_read_key_value", ("key", "value"))):

                def ms_frame(columns=columns):  # noqa: ANN202
                    frame = read_ms.load()
                    return frame if columns is None else frame.select(*columns)

                pq_frame = read_pq if columns is None else read_pq.select(*columns)
                scan(ms_frame())
                scan(pq_frame)
                ms_times, pq_times = [], []
                for _ in range(args.repeats):
                    pq_times.append(timed(lambda pq_frame=pq_frame: scan(pq_frame)))
                    ms_times.append(timed(lambda ms_frame=ms_frame: scan(ms_frame())))
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
        finally:
            cluster.down()
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
