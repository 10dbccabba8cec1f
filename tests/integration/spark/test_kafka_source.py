"""Spark's own Kafka source against a node's Kafka listener: Apache Kafka's
VerifiableProducer (Java) writes N records to a msgstore node, and
``spark.read.format("kafka")`` (spark-sql-kafka-0-10 from Maven Central,
scripts/spark-kafka-jars.sh) reads the topic from the earliest offsets: the count and the
sum of the produced numbers are exactly what was produced.

Spark runs in a process of its own: the connector's jars must be on the classpath when the
JVM starts, and the folder's shared session is started without them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.kafka.conftest import KafkaNode
from tests.integration.kafka.java import run_java

ROOT = Path(__file__).resolve().parents[3]
RECORDS = 5_000
PARTITIONS = 3

READ = """
import json, sys
from pyspark.sql import SparkSession, functions as F
jars, servers, topic = sys.argv[1:4]
spark = (
    SparkSession.builder.master("local[2]").appName("msgstore-kafka-source")
    .config("spark.jars", jars).config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
rows = (
    spark.read.format("kafka")
    .option("kafka.bootstrap.servers", servers)
    .option("subscribe", topic)
    .option("startingOffsets", "earliest")
    .option("endingOffsets", "latest")
    .load()
)
numbers = rows.select(F.col("value").cast("string").cast("long").alias("n"), "partition")
row = numbers.agg(
    F.count("n").alias("count"), F.sum("n").alias("sum"),
    F.countDistinct("partition").alias("partitions"),
).collect()[0]
print("RESULT " + json.dumps(row.asDict()))
spark.stop()
"""


def spark_kafka_jars() -> str:
    """The connector's jars (comma-separated); fails the test with the reason when Java or
    Maven is missing or the jars cannot be fetched."""
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "spark-kafka-jars.sh")], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/spark-kafka-jars.sh failed:\n{result.stderr[-3000:]}")
    return result.stdout.strip()


def test_spark_reads_what_a_java_producer_wrote(tmp_path: Path):
    jars = spark_kafka_jars()
    node = KafkaNode(tmp_path / "node")
    node.start()
    try:
        topic = "spark-kafka-source"
        node.create_topic(topic, partitions=PARTITIONS)
        out = run_java(
            tmp_path,
            "org.apache.kafka.tools.VerifiableProducer",
            "--topic", topic, "--bootstrap-server", node.bootstrap,
            "--max-messages", str(RECORDS), "--acks", "-1",
        )  # fmt: skip
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        sent = [int(e["value"]) for e in events if e.get("name") == "producer_send_success"]
        assert sorted(sent) == list(range(RECORDS))
        offsets = node.offsets(topic)
        assert sum(nxt - first for first, nxt in offsets) == RECORDS
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        result = subprocess.run(
            [sys.executable, "-c", READ, jars, node.bootstrap, topic],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        (line,) = [x for x in result.stdout.splitlines() if x.startswith("RESULT ")]
        got = json.loads(line.removeprefix("RESULT "))
        print("spark_kafka_source", json.dumps(got))
        assert got == {
            "count": RECORDS,
            "sum": RECORDS * (RECORDS - 1) // 2,
            "partitions": sum(1 for first, nxt in offsets if nxt > first),
        }
    finally:
        node.stop()
