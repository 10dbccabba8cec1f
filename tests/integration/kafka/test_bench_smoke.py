"""bench/kafka.py runs end to end on a tiny load: it starts a real Apache Kafka broker and a
msgstore node, runs Kafka's producer and consumer perf tools against both and prints its JSON
rows. Only that it runs and what it prints is checked, never how fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.integration.kafka.java import ROOT, kafka_classpath


def test_bench_prints_its_rows(tmp_path):
    kafka_classpath()  # the jars, fetched once, before the timed-out run below
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "kafka.py"),
            "--quick",
            "--messages",
            "3000",
            "--partitions",
            "2",
            "--partitions-curve",
            "3,40",
            "--profile",
            str(tmp_path / "profile"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    by_bench = {}
    for row in rows:
        by_bench.setdefault(row["bench"], []).append(row)
    (produce,) = by_bench["kafka_produce"]
    (consume,) = by_bench["kafka_consume"]
    for row, ratio in ((produce, "ratio_produce_vs_kafka"), (consume, "ratio_consume_vs_kafka")):
        assert row["messages"] == 3000 and row["partitions"] == 2
        assert row["durability"] == "page-cache"  # alike on both: the default
        assert row["kafka_msgs_per_s"] > 0 and row["msgstore_msgs_per_s"] > 0
        assert row[ratio] > 0
        assert row["kafka_cpu_s_per_million"] >= 0 and row["msgstore_cpu_s_per_million"] >= 0
    curve = {row["partitions"]: row for row in by_bench["kafka_produce_curve"]}
    for partitions in (3, 40):  # a count over msgstore's limit (8,192) is not run here: a
        # Kafka topic that large takes minutes to create; the limit has its own tests
        assert curve[partitions]["ratio_produce_vs_kafka"] > 0
        assert curve[partitions]["msgstore_msgs_per_s"] > 0
    # --profile: py-spy sampled the node's threads in both of its runs
    (profile,) = by_bench["kafka_profile"]
    for phase in ("produce", "consume"):
        assert (tmp_path / "profile" / f"{phase}-0.txt").stat().st_size > 0
        shares = [share for share, _frame in profile[phase]]
        assert shares and all(0 < s <= 1 for s in shares), profile


def test_the_ab_bench_compares_two_trees_interleaved():
    """bench/kafka_ab.py with this checkout as both trees: one JSON line per run, A and B
    alternating (ABBA), and the summary of both."""
    kafka_classpath()
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "kafka_ab.py"), str(ROOT), str(ROOT)]
        + ["--rounds", "2", "--messages", "3000", "--warmup-messages", "500"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    runs = [r for r in rows if r["bench"] == "kafka_ab_run"]
    assert [r["round"] for r in runs] == [0, 0, 1, 1]
    assert all(r["msgs_per_s"] > 0 and r["cpu_s_per_million"] >= 0 for r in runs)
    (summary,) = [r for r in rows if r["bench"] == "kafka_ab"]
    assert len(summary["a"]["rounds"]) == 2 and len(summary["b"]["rounds"]) == 2
    assert summary["ratio_b_vs_a"] > 0
