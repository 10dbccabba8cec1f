"""Load JSON lines, CSV or Parquet files into a msgstore topic (created when absent).

    python spark/jobs/ingest.py --endpoints http://127.0.0.1:7100 --topic orders \
        --input data/sample/orders-20000.jsonl --format json --key-column order_id \
        --tag-column event_type --timestamp-column ts

Runs on local[*] under plain python, or on the cluster given to spark-submit. Each message's
value is the source record: the original line for JSON, the row as a JSON object for CSV and
Parquet. Prints the rows written and the rate, and a final JSON line for programs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from _bootstrap import ensure_importable

ensure_importable()

from msgstore_spark.session import job_session  # noqa: E402
from pyspark.sql import Column, DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import NumericType, StringType, TimestampType  # noqa: E402

from storage_node.errors import MsgStoreError  # noqa: E402

FORMATS = ("json", "jsonl", "csv", "parquet")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoints", "--endpoint", required=True, help="node URLs, comma-separated")
    p.add_argument("--topic", required=True)
    p.add_argument("--input", required=True, help="file, directory or glob")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--key-column", "--key-field", dest="key_column")
    p.add_argument("--tag-column", dest="tag_column")
    p.add_argument("--timestamp-column", dest="timestamp_column", help="ms since epoch or a time")
    p.add_argument("--partitions", type=int, default=6, help="when the topic is created")
    p.add_argument("--compression", choices=("lz4", "none"), default="lz4")
    p.add_argument("--batch-size", type=int, default=10_000, help="messages per request")
    p.add_argument("--token", default=os.environ.get("MSGSTORE_TOKEN"))
    p.add_argument(
        "--ca",
        default=os.environ.get("MSGSTORE_CA"),
        help="CA certificate the nodes' TLS certificates verify against (env MSGSTORE_CA)",
    )
    p.add_argument("--master", help="Spark master (default local[*] outside spark-submit)")
    return p.parse_args(argv)


def _json_field(value: Column, name: str) -> Column:
    return F.get_json_object(value, f"$.{name}")


def _as_ms(col: Column, data_type: object) -> Column:
    """A born time in ms from epoch-ms numbers, timestamps, or text of either."""
    if isinstance(data_type, TimestampType):
        return F.unix_millis(col)
    if isinstance(data_type, NumericType):
        return col.cast("long")
    text = col.cast("string")
    return F.when(text.rlike(r"^\d+$"), text.cast("long")).otherwise(
        F.unix_millis(F.to_timestamp(text))
    )


def messages_frame(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """Source records as message columns: value, and key/tag/timestamp when asked for."""
    if args.format in ("json", "jsonl"):
        # keep each record's bytes as they are; pull fields out without a schema pass. The
        # line rule is msgstore produce's (storage_node/formats/json_lines.py): lines end at
        # \n, a CRLF's \r and a byte order mark are not data, blank lines are skipped
        lines = spark.read.option("lineSep", "\n").text(args.input)
        content = F.regexp_replace(F.regexp_replace("value", "^\ufeff", ""), "\r$", "")
        df = lines.select(content.alias("value")).where(~F.col("value").rlike(r"^\s*$"))
        value = F.col("value")
        types: dict[str, object] = {}

        def field(name: str) -> Column:
            return _json_field(value, name)
    else:
        reader = spark.read.format(args.format)
        if args.format == "csv":
            reader = reader.option("header", "true").option("inferSchema", "false")
        src = reader.load(args.input)
        types = {f.name: f.dataType for f in src.schema.fields}
        for name in (args.key_column, args.tag_column, args.timestamp_column):
            if name and name not in types:
                raise SystemExit(f"column {name!r} is not in the input (it has {sorted(types)})")
        df = src.select(F.to_json(F.struct(*[F.col(c) for c in src.columns])).alias("value"), "*")

        def field(name: str) -> Column:
            return F.col(name)

    cols = [F.col("value")]
    if args.key_column:
        cols.append(field(args.key_column).cast("string").alias("key"))
    if args.tag_column:
        cols.append(field(args.tag_column).cast("string").alias("tag"))
    if args.timestamp_column:
        kind = types.get(args.timestamp_column, StringType())
        cols.append(_as_ms(field(args.timestamp_column), kind).alias("timestamp"))
    return df.select(*cols)


def ingest(spark: SparkSession, args: argparse.Namespace) -> dict:
    """Write the input into the topic; returns the write summary plus the rate."""
    frame = messages_frame(spark, args)
    with tempfile.TemporaryDirectory(prefix="msgstore-ingest-") as tmp:
        summary_path = os.path.join(tmp, "summary.json")
        started = time.perf_counter()
        writer = (
            frame.write.format("msgstore")
            .option("endpoints", args.endpoints)
            .option("topic", args.topic)
            .option("partitions", str(args.partitions))
            .option("compression", args.compression)
            .option("batchSize", str(args.batch_size))
            .option("summaryPath", summary_path)
        )
        if args.token:
            writer = writer.option("token", args.token)
        ca = getattr(args, "ca", None)  # a Namespace built by a caller may lack it
        if ca:
            writer = writer.option("ca", ca)
        writer.mode("append").save()
        seconds = time.perf_counter() - started
        with open(summary_path) as fh:
            summary = json.load(fh)
    summary["seconds"] = round(seconds, 3)
    summary["rows_per_s"] = round(summary["rows"] / seconds) if seconds > 0 else None
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = job_session(f"msgstore-ingest-{args.topic}", args.master)
    try:
        summary = ingest(spark, args)
    except MsgStoreError as err:
        print(f"ingest failed: {err}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(
        f"wrote {summary['rows']} rows to topic {args.topic!r} in {summary['seconds']} s "
        f"({summary['rows_per_s']} rows/s)"
    )
    print(json.dumps({"ingest": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
