"""``msgstore_spark.load``: the JVM batch reader against real nodes, checked row for row
against the Python source (``format("msgstore")``), through moves, outages, TLS and tokens."""

from __future__ import annotations

import json

import msgstore_spark
import pytest
from msgstore_spark.errors import OptionError
from msgstore_spark.jvm_reader import SOURCE_CLASS
from pyspark.sql import functions as F

COLUMNS = ("topic", "partition", "offset", "key", "value", "tag", "msg_id", "timestamp")


def rows(df, columns=COLUMNS):
    return sorted(tuple(r) for r in df.select(*columns).collect())


@pytest.fixture(scope="module")
def mixed_topic(spark, endpoints, client):
    """Keys, tags and message IDs present and absent, non-UTF-8 and empty values in 4
    partitions, in files of every local state: LZ4-compacted, sealed and the open segment
    (segments roll at 4 MiB in this folder's cluster)."""
    client.create_topic("jvm-mixed", 4)

    def write(first: int) -> None:
        ids = spark.range(first, first + 20_000)
        ids.select(
            F.when(F.col("id") % 7 == 0, F.lit(None))
            .otherwise(F.concat(F.lit("ключ-"), F.col("id").cast("string")))
            .alias("key"),
            F.when(F.col("id") % 11 == 0, F.lit(b""))
            .otherwise(F.concat(F.unhex(F.lit("FF00FE")), F.repeat(F.col("id").cast("string"), 80)))
            .cast("binary")
            .alias("value"),
            F.when(F.col("id") % 3 == 0, F.lit("red")).otherwise(F.lit(None)).alias("tag"),
        ).write.format("msgstore").option("endpoints", endpoints).option("topic", "jvm-mixed").mode(
            "append"
        ).save()

    write(0)
    client.compact()  # the sealed files of the first half become LZ4 blocks
    write(20_000)
    states = {
        f["state"] for d in client.files().values() for f in d["files"] if f["kind"] == "segment"
    }
    assert {"compacted", "sealed"} <= states, states
    return "jvm-mixed"


def both(spark, endpoints, topic, **options):
    opts = {"endpoints": endpoints, "topic": topic, **options}
    return (
        msgstore_spark.load(spark, **opts),
        spark.read.format("msgstore").options(**opts).load(),
    )


def test_load_reads_exactly_what_the_python_source_reads(spark, endpoints, mixed_topic):
    jvm, python = both(spark, endpoints, mixed_topic)
    got = rows(jvm)
    assert len(got) == 40_000
    assert got == rows(python)
    assert jvm.schema == python.schema
    nulls = jvm.select(
        F.sum(F.col("key").isNull().cast("int")).alias("keys"),
        F.sum(F.col("tag").isNull().cast("int")).alias("tags"),
        F.sum((F.length("value") == 0).cast("int")).alias("empty"),
    ).first()
    assert (nulls["keys"], nulls["tags"], nulls["empty"]) == (5715, 26666, 3637)


@pytest.mark.parametrize(
    "columns", [("value",), ("offset", "partition"), ("msg_id", "timestamp", "topic")]
)
def test_pruned_columns_read_the_same_values(spark, endpoints, mixed_topic, columns):
    jvm, python = both(spark, endpoints, mixed_topic)
    pruned = jvm.select(*columns)
    read = ",".join(c for c in COLUMNS if c in columns)  # in the table's order
    assert f"msgstore fetch {read} " in pruned._jdf.queryExecution().toString()
    assert rows(pruned, columns) == rows(python, columns)


def test_ranges_tags_and_small_pages(spark, endpoints, client, mixed_topic):
    ends = {
        p["partition"]: p["next_offset"]
        for p in client.describe_topic(mixed_topic)["partition_offsets"]
    }
    options = {
        "startingOffsets": json.dumps({mixed_topic: {"0": 17, "1": -2, "3": -1}}),
        "endingOffsets": json.dumps({mixed_topic: {"0": 1017, "2": ends[2] - 5}}),
        "tag": "red",
        "fetchSize": "333",
        "maxRecordsPerPartition": "2000",
    }
    jvm, python = both(spark, endpoints, mixed_topic, **options)
    got = rows(jvm)
    assert got == rows(python)
    assert got and {r[5] for r in got} == {"red"}
    offsets0 = [r[2] for r in got if r[1] == 0]
    assert min(offsets0) >= 17 and max(offsets0) < 1017
    assert not [r for r in got if r[1] == 3]  # latest .. latest


def test_an_empty_range_is_an_empty_frame(spark, endpoints, mixed_topic):
    df = msgstore_spark.load(
        spark, endpoints=endpoints, topic=mixed_topic, startingOffsets="latest"
    )
    assert df.count() == 0 and df.columns == list(COLUMNS)


def test_bad_options_are_refused_before_spark_reads(spark, endpoints, mixed_topic):
    with pytest.raises(OptionError, match="fetchSize"):
        msgstore_spark.load(spark, endpoints=endpoints, topic=mixed_topic, fetchSize="0")
    with pytest.raises(OptionError, match="endingOffsets"):
        msgstore_spark.load(
            spark,
            endpoints=endpoints,
            topic=mixed_topic,
            endingOffsets=json.dumps({mixed_topic: {"0": 10**9}}),
        )
    with pytest.raises(Exception, match="plan"):
        spark.read.format(SOURCE_CLASS).load().count()


def _plan(endpoints, topic, address, ranges, timeout_ms=60_000):
    return json.dumps(
        {
            "tasks": [{"topic": topic, "ranges": [[*r, address] for r in ranges]}],
            "endpoints": endpoints,
            "fetchSize": 10_000,
            "tag": None,
            "timeoutMs": timeout_ms,
            "ca": None,
        }
    )


def test_a_plan_naming_a_gone_or_wrong_node_finds_the_owner(spark, cluster, client, mixed_topic):
    """Ownership moved or the planned owner died: the first node answers 421 naming the owner,
    or does not answer and the next endpoint does; either way the same rows arrive."""
    info = client.describe_topic(mixed_topic)["partition_offsets"]
    part = info[1]
    wrong = next(a for a in cluster.addresses if a != part["owner_address"])
    ranges = [[1, 0, part["next_offset"]]]
    want = rows(
        msgstore_spark.load(
            spark,
            endpoints=",".join(cluster.addresses),
            topic=mixed_topic,
            startingOffsets=json.dumps({mixed_topic: {"0": -1, "2": -1, "3": -1}}),
        )
    )
    assert len(want) == part["next_offset"]
    for address, endpoints in (
        (wrong, cluster.addresses),
        ("http://127.0.0.1:1", ["http://127.0.0.1:1", *cluster.addresses]),
    ):
        df = spark.read.format(SOURCE_CLASS).option(
            "plan", _plan(endpoints, mixed_topic, address, ranges)
        )
        assert rows(df.load()) == want


def test_a_leader_killed_after_planning_is_read_through_its_new_leader(spark, tmp_path_factory):
    """Replicated logs (factor 3, a local failover controller): the DataFrame's ranges are
    planned, then the node leading the first partitions is killed. The reader's fetches to it
    fail, the other endpoints name the new leader once the controller has promoted one, and
    every acknowledged row is read, once."""
    from storage_node.cli.local import LocalCluster
    from storage_node.client import Client

    replicated = LocalCluster(tmp_path_factory.mktemp("jvm-replicated"))
    replicated.up(nodes=3, replication_factor=3)
    try:
        replicated.wait_leaders()
        endpoints = ",".join(replicated.addresses)
        spark.range(30_000).select(F.col("id").cast("string").alias("value")).write.format(
            "msgstore"
        ).options(endpoints=endpoints, topic="r", partitions="6").mode("append").save()
        planned = msgstore_spark.load(spark, endpoints=endpoints, topic="r")
        with Client(replicated.addresses) as client:
            owner = client.describe_topic("r")["partition_offsets"][0]["owner_address"]
        victim = next(n for n in replicated.nodes if owner.endswith(f":{n.port}"))
        replicated.kill(victim.id)
        values = planned.select(F.col("value").cast("string").alias("v")).collect()
        assert sorted(int(r["v"]) for r in values) == list(range(30_000))
    finally:
        replicated.down()


def test_no_node_answering_fails_the_read_naming_the_topic(spark, mixed_topic):
    plan = _plan(["http://127.0.0.1:1"], mixed_topic, "http://127.0.0.1:1", [[0, 0, 10]], 1500)
    with pytest.raises(Exception, match="msgstore fetch of topic jvm-mixed gave up"):
        spark.read.format(SOURCE_CLASS).option("plan", plan).load().count()


def test_tls_and_token(spark, tmp_path_factory):
    """HTTPS verified against the store's CA, the token sent as a bearer header; a CA that
    did not sign the nodes' certificates and a wrong token are refused."""
    from storage_node.cli.local import LocalCluster

    secured = LocalCluster(tmp_path_factory.mktemp("jvm-tls"))
    secured.up(nodes=2, env={"MSGSTORE_TOKEN": "s3cret"}, tls=True)
    other = LocalCluster(tmp_path_factory.mktemp("jvm-other-ca"))
    other.up(nodes=1, tls=True)
    try:
        endpoints = ",".join(secured.addresses)
        opts = {"endpoints": endpoints, "ca": secured.ca_file, "token": "s3cret"}
        df = spark.range(3000).select(F.col("id").cast("string").alias("value"))
        df.write.format("msgstore").options(**opts, topic="t", partitions="2").mode("append").save()
        got = msgstore_spark.load(spark, **opts, topic="t")
        assert sorted(
            int(r["value"])
            for r in got.select(F.col("value").cast("string").alias("value")).collect()
        ) == list(range(3000))
        with pytest.raises(Exception, match="token"):
            msgstore_spark.load(spark, **{**opts, "token": "wrong"}, topic="t")
        # a plan whose CA signed none of these nodes' certificates: refused at once
        wrong_ca = json.dumps(
            {
                "tasks": [{"topic": "t", "ranges": [[0, 0, 5, secured.addresses[0]]]}],
                "endpoints": secured.addresses,
                "fetchSize": 100,
                "tag": None,
                "timeoutMs": 3000,
                "ca": other.ca_file,
            }
        )
        with pytest.raises(Exception, match="TLS to msgstore node .* failed.*'ca' option"):
            spark.read.format(SOURCE_CLASS).option("plan", wrong_ca).option(
                "token", "s3cret"
            ).load().count()
    finally:
        secured.down()
        other.down()


NO_JAR_SESSION = """
import sys
import msgstore_spark
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
try:
    msgstore_spark.load(spark, endpoints=sys.argv[1], topic=sys.argv[2])
    print("NO ERROR")
except msgstore_spark.jvm_reader.ReaderJarMissing as err:
    print("MISSING", err)
finally:
    spark.stop()
"""


def test_a_session_without_the_jar_is_told_how_to_get_it(endpoints, mixed_topic, tmp_path):
    """A session built without ``with_msgstore_settings`` (another process: one JVM per
    process) gets an error naming the fix, not Spark's unknown-source error."""
    import subprocess
    import sys

    script = tmp_path / "no_jar.py"
    script.write_text(NO_JAR_SESSION)
    proc = subprocess.run(
        [sys.executable, str(script), endpoints, mixed_topic],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "MISSING" in proc.stdout and "with_msgstore_settings" in proc.stdout, proc.stderr[-2000:]


def test_a_reader_jar_javac_cannot_build_is_a_clear_error(tmp_path, monkeypatch):
    """Real javac over a source it rejects: ``ReaderJarMissing`` with javac's message, and no
    jar left in the cache (a session then still starts, without ``load``)."""
    from msgstore_spark import jvm_reader

    sources = tmp_path / "jvm" / "msgstore" / "spark"
    sources.mkdir(parents=True)
    (sources / "Broken.java").write_text("package msgstore.spark; class Broken { int x = ; }\n")
    monkeypatch.setattr(jvm_reader, "_SOURCES", tmp_path / "jvm")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(jvm_reader.ReaderJarMissing, match="javac could not build.*Broken.java"):
        jvm_reader.jar_path()
    assert not list((tmp_path / "cache").rglob("*.jar"))
