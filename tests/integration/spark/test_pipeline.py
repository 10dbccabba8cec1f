"""The data source and jobs against a real local 3-node cluster, Spark local[2].

Shared fixtures (one SparkSession, one cluster) keep the folder's run time to a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import pytest
from pyspark.sql import functions as F

from storage_node.demo.sample_data import ensure_sample_file

ROWS = 200_000


def read_topic(spark, endpoints, topic, **options):
    reader = spark.read.format("msgstore").option("endpoints", endpoints).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def fingerprint(df, column="value"):
    """(rows, order-free checksum of the column's bytes)."""
    row = df.agg(F.count("*").alias("n"), F.sum(F.crc32(F.col(column))).alias("sum")).first()
    return row["n"], row["sum"]


def ingest_args(endpoints, topic, path, fmt, **extra):
    base = {
        "endpoints": endpoints,
        "topic": topic,
        "input": str(path),
        "format": fmt,
        "key_column": "order_id",
        "tag_column": "event_type",
        "timestamp_column": "ts",
        "partitions": 6,
        "compression": "lz4",
        "batch_size": 10_000,
        "token": None,
        "master": None,
    }
    base.update(extra)
    return argparse.Namespace(**base)


@pytest.fixture(scope="session")
def sample_json(tmp_path_factory):
    return ensure_sample_file(tmp_path_factory.mktemp("sample") / "orders.jsonl", ROWS)


def test_ingest_json_reads_back_equal(spark, endpoints, sample_json, ingest_job):
    ingest = ingest_job
    summary = ingest.ingest(spark, ingest_args(endpoints, "orders-json", sample_json, "json"))
    assert summary["rows"] == ROWS and summary["status"] == "committed"

    source = spark.read.text(str(sample_json))
    stored = read_topic(spark, endpoints, "orders-json")
    assert fingerprint(stored) == fingerprint(source)
    # keys, tags and born times come from the named fields
    expected = source.select(
        F.get_json_object("value", "$.order_id").alias("key"),
        F.get_json_object("value", "$.event_type").alias("tag"),
        F.get_json_object("value", "$.ts").cast("long").alias("ts"),
        F.col("value").cast("binary").alias("value"),
    )
    got = stored.select("key", "tag", F.unix_millis("timestamp").alias("ts"), "value")
    assert expected.exceptAll(got).count() == 0
    # every partition holds exactly the keys that hash to it
    per_key = stored.groupBy("key").agg(F.countDistinct("partition").alias("n"))
    assert per_key.where("n > 1").count() == 0


def test_ingest_parquet_reads_back_equal(spark, endpoints, sample_json, tmp_path, ingest_job):
    parquet = tmp_path / "orders.parquet"
    spark.read.json(str(sample_json)).write.parquet(str(parquet))
    ingest = ingest_job
    summary = ingest.ingest(spark, ingest_args(endpoints, "orders-parquet", parquet, "parquet"))
    assert summary["rows"] == ROWS

    source = spark.read.parquet(str(parquet))
    as_json = source.select(F.to_json(F.struct(*source.columns)).alias("value"))
    stored = read_topic(spark, endpoints, "orders-parquet")
    assert fingerprint(stored) == fingerprint(as_json)
    assert stored.select("key").distinct().count() == source.select("order_id").distinct().count()


@pytest.fixture(scope="module")
def small_topic(spark, endpoints, client):
    """1,200 messages in 3 partitions written in two rounds separated by a known time."""
    client.create_topic("ranges", 3)
    df = spark.range(600).select(
        F.col("id").cast("string").alias("key"),
        F.concat(F.lit("a-"), F.col("id").cast("string")).alias("value"),
    )
    df.write.format("msgstore").option("endpoints", endpoints).option("topic", "ranges").mode(
        "append"
    ).save()
    time.sleep(0.05)  # so the two rounds get distinct store times (ms)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    df.select("key", F.regexp_replace("value", "^a-", "b-").alias("value")).write.format(
        "msgstore"
    ).option("endpoints", endpoints).option("topic", "ranges").mode("append").save()
    return boundary


def test_offset_ranges(spark, endpoints, client, small_topic):
    info = client.describe_topic("ranges")
    ends = {p["partition"]: p["next_offset"] for p in info["partition_offsets"]}
    assert sum(ends.values()) == 1200
    df = read_topic(
        spark,
        endpoints,
        "ranges",
        startingOffsets=json.dumps({"ranges": {"0": 10, "1": -2, "2": -1}}),
        endingOffsets=json.dumps({"ranges": {"0": 20}}),
    )
    rows = df.select("partition", "offset").collect()
    by_part = {}
    for r in rows:
        by_part.setdefault(r["partition"], []).append(r["offset"])
    assert sorted(by_part[0]) == list(range(10, 20))
    assert sorted(by_part[1]) == list(range(ends[1]))
    assert 2 not in by_part  # latest .. latest is empty
    # maxRecordsPerPartition splits ranges into more tasks, same rows
    split = read_topic(spark, endpoints, "ranges", maxRecordsPerPartition="100")
    assert split.rdd.getNumPartitions() >= 12
    assert fingerprint(split) == fingerprint(read_topic(spark, endpoints, "ranges"))


def test_small_ranges_share_tasks_and_read_the_same_rows(spark, endpoints, small_topic):
    """The 1,200 rows of three partitions fit one task by default; one task per partition
    (minRecordsPerTask=1) reads exactly the same (partition, offset, value) rows."""
    packed = read_topic(spark, endpoints, "ranges")
    apart = read_topic(spark, endpoints, "ranges", minRecordsPerTask="1")
    assert packed.rdd.getNumPartitions() == 1
    assert apart.rdd.getNumPartitions() == 3
    rows = sorted(tuple(r) for r in packed.select("partition", "offset", "value").collect())
    assert len(rows) == 1200
    assert rows == sorted(tuple(r) for r in apart.select("partition", "offset", "value").collect())
    # a cap below the default target still bounds every task
    capped = read_topic(spark, endpoints, "ranges", maxRecordsPerPartition="250")
    assert capped.rdd.getNumPartitions() >= 1200 // 250
    assert fingerprint(capped) == fingerprint(packed)


def test_timestamps_select_by_store_time(spark, endpoints, small_topic):
    after = read_topic(spark, endpoints, "ranges", startingTimestamp=str(small_topic))
    values = [r["v"] for r in after.select(F.col("value").cast("string").alias("v")).collect()]
    assert len(values) == 600 and all(v.startswith("b-") for v in values)
    before = read_topic(spark, endpoints, "ranges", endingTimestamp=str(small_topic))
    values = [r["v"] for r in before.select(F.col("value").cast("string").alias("v")).collect()]
    assert len(values) == 600 and all(v.startswith("a-") for v in values)


def test_task_failures_neither_duplicate_nor_lose(spark, endpoints, client, tmp_path):
    """Each task dies on its first attempt after some of its batches reached the nodes."""
    client.create_topic("retries", 4)
    marker_dir = str(tmp_path)
    total = 20_000

    def fail_first_attempt(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        sent = 0
        for batch in batches:
            yield batch
            sent += batch.num_rows
            if ctx.attemptNumber() == 0 and sent >= 3_000:
                path = os.path.join(marker_dir, f"failed-{ctx.partitionId()}")
                with open(path, "w") as fh:
                    fh.write(str(sent))
                raise RuntimeError("injected failure on the first attempt")

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        df = spark.range(total, numPartitions=2).select(
            F.col("id").cast("string").alias("key"),
            F.concat(F.lit("r-"), F.col("id").cast("string")).alias("value"),
        )
        df = df.mapInArrow(fail_first_attempt, df.schema)
        df.write.format("msgstore").option("endpoints", endpoints).option(
            "topic", "retries"
        ).option("batchSize", "500").mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    failures = sorted(os.listdir(marker_dir))
    assert failures == ["failed-0", "failed-1"]  # both tasks really failed once
    stored = read_topic(spark, endpoints, "retries")
    assert stored.count() == total
    assert stored.select("value").distinct().count() == total


def test_bad_input_is_refused_and_changes_nothing(spark, endpoints, client):
    client.create_topic("guarded", 2)
    before = client.describe_topic("guarded")["partition_offsets"]
    good = spark.range(10).select(F.col("id").cast("string").alias("value"))

    def write(df, **options):
        w = df.write.format("msgstore").option("endpoints", endpoints).option("topic", "guarded")
        for k, v in options.items():
            w = w.option(k, v)
        w.mode("append").save()

    with pytest.raises(Exception, match="value"):
        write(spark.range(3).select(F.col("id").alias("payload")))
    with pytest.raises(Exception, match="vaule"):
        write(good.withColumn("vaule", F.lit("x")))
    with pytest.raises(Exception, match="partition"):
        write(good.withColumn("partition", F.lit(7)))
    with pytest.raises(Exception, match="append-only"):
        good.write.format("msgstore").option("endpoints", endpoints).option(
            "topic", "guarded"
        ).mode("overwrite").save()
    with pytest.raises(Exception, match="batchSize"):
        write(good, batchSize="lots")
    with pytest.raises(Exception, match="does not exist"):
        good.write.format("msgstore").option("endpoints", endpoints).option(
            "topic", "no-such-topic"
        ).mode("append").save()
    assert client.describe_topic("guarded")["partition_offsets"] == before
    with pytest.raises(Exception, match="no-such-topic"):
        read_topic(spark, endpoints, "no-such-topic").count()
    with pytest.raises(Exception, match="startingOffsets"):
        read_topic(spark, endpoints, "guarded", startingOffsets='{"guarded": {"9": 0}}').count()
    with pytest.raises(Exception, match="endpoints"):
        read_topic(spark, "http://127.0.0.1:1", "guarded").count()


def test_auth_failure_names_the_token(spark, tmp_path_factory):
    from storage_node.cli.local import LocalCluster

    secured = LocalCluster(tmp_path_factory.mktemp("secured"))
    secured.up(nodes=1, env={"MSGSTORE_TOKEN": "s3cret"})
    try:
        address = secured.addresses[0]
        with pytest.raises(Exception, match="token"):
            read_topic(spark, address, "any").count()
        with pytest.raises(Exception, match="token"):
            read_topic(spark, address, "any", token="wrong").count()
        df = spark.range(5).select(F.col("id").cast("string").alias("value"))
        df.write.format("msgstore").option("endpoints", address).option("topic", "t").option(
            "partitions", "1"
        ).option("token", "s3cret").mode("append").save()
        assert read_topic(spark, address, "t", token="s3cret").count() == 5
    finally:
        secured.down()


def test_streaming_read_sees_new_messages_and_stream_write_copies(
    spark, endpoints, client, tmp_path
):
    client.create_topic("live", 3)
    client.produce("live", [{"key": f"old-{i}", "value": f"old-{i}"} for i in range(50)])
    stream = (
        spark.readStream.format("msgstore")
        .option("endpoints", endpoints)
        .option("topic", "live")
        .load()
    )
    query = (
        stream.select("key", "value", "tag")  # the copy picks its own partitions
        .writeStream.format("msgstore")
        .option("endpoints", endpoints)
        .option("topic", "live-copy")
        .option("partitions", "2")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while not query.recentProgress and time.monotonic() < deadline:
            time.sleep(0.5)  # wait for the first batch: it fixes the start at 'latest'
        client.produce("live", [{"key": f"new-{i}", "value": f"new-{i}"} for i in range(300)])
        copied = 0
        while time.monotonic() < deadline:
            info = client.describe_topic("live-copy")
            copied = sum(p["next_offset"] for p in info["partition_offsets"])
            if copied >= 300:
                break
            time.sleep(0.5)
        assert query.exception() is None
    finally:
        query.stop()
    values = read_topic(spark, endpoints, "live-copy").select(
        F.col("value").cast("string").alias("v")
    )
    got = sorted(r["v"] for r in values.collect())
    assert got == sorted(f"new-{i}" for i in range(300))  # only what came after the start


def test_compact_job_moves_files_and_keeps_answers(spark, endpoints, client, compact_job):
    # lookups before: by key, by message ID and by offset, on the JSON topic's data
    sample = client.read("orders-json", 0, offset=0, max_messages=5)["messages"]
    keys = sorted({m["key"] for m in sample})
    before_keys = {k: client.lookup_key("orders-json", k, max_count=100) for k in keys}
    before_ids = {m["msg_id"]: client.get_message(m["msg_id"]) for m in sample}
    before_page = client.read("orders-json", 1, offset=100, max_messages=50)

    compact = compact_job
    args = argparse.Namespace(endpoints=endpoints, seal=True, token=None, master=None)
    summary = compact.compact(spark, args)
    assert summary["files"] >= 6 and summary["compacted"] == summary["files"]
    assert summary["bytes_after"] < summary["bytes_before"]

    files = client.files()
    states = {f["state"] for doc in files.values() for f in doc["files"] if f["kind"] == "segment"}
    assert "sealed" not in states and "compacted" in states
    for doc in files.values():
        assert not [f for f in doc["files"] if f["state"] == "sealed"]
    for key, answer in before_keys.items():
        assert client.lookup_key("orders-json", key, max_count=100) == answer
    for msg_id, message in before_ids.items():
        assert client.get_message(msg_id) == message
    assert client.read("orders-json", 1, offset=100, max_messages=50) == before_page
