"""One JSON-lines file gives the same messages through ``msgstore produce`` and through the
Spark ingest job: CRLF line ends, a byte order mark, a literal tab inside a JSON string and
ISO times read by one rule (storage_node/formats/json_lines.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

LINES = [
    b'\xef\xbb\xbf{"id": "a", "ts": "2026-11-24T10:00:00Z", "note": "x"}\r\n',
    b'{"id": "b", "ts": 1795489254810, "note": "tab\there"}\r\n',
    b'{"id": "c", "ts": "2026-11-24T10:00:00.250+01:00"}\n',
    b"\r\n",
    b'{"id": "d", "ts": "2026-11-24T10:00:00"}\n',
]


def stored(client, topic: str) -> list[tuple[bytes, str, int]]:
    info = client.describe_topic(topic)
    out = []
    for part in info["partition_offsets"]:
        cols = client.read_columns(topic, part["partition"], offset=0, max_messages=100)
        for row in cols.to_rows(topic):
            out.append((bytes(row["value"]), row["key"], row["timestamp"]))
    return sorted(out)


def test_the_cli_and_the_spark_job_read_one_file_alike(
    spark, endpoints, client, ingest_job, tmp_path
):
    path = tmp_path / "input.jsonl"
    path.write_bytes(b"".join(LINES))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGSTORE_")}
    subprocess.run(
        [sys.executable, "-m", "storage_node.cli", "topic", "create", "rule-cli"]
        + ["--endpoint", endpoints.split(",")[0]],
        check=True,
        capture_output=True,
        env=env,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "storage_node.cli", "produce", "rule-cli", "--file", str(path)]
        + ["--key-field", "id", "--time-field", "ts", "--endpoint", endpoints.split(",")[0]],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    args = argparse.Namespace(
        endpoints=endpoints,
        topic="rule-spark",
        input=str(path),
        format="json",
        key_column="id",
        tag_column=None,
        timestamp_column="ts",
        partitions=3,
        compression="lz4",
        batch_size=1000,
        token=None,
        ca=None,
        master=None,
    )
    assert ingest_job.ingest(spark, args)["rows"] == 4
    via_cli, via_spark = stored(client, "rule-cli"), stored(client, "rule-spark")
    assert via_cli == via_spark
    assert via_cli == sorted(
        [
            (b'{"id": "a", "ts": "2026-11-24T10:00:00Z", "note": "x"}', "a", 1795514400000),
            (b'{"id": "b", "ts": 1795489254810, "note": "tab\there"}', "b", 1795489254810),
            (b'{"id": "c", "ts": "2026-11-24T10:00:00.250+01:00"}', "c", 1795510800250),
            (b'{"id": "d", "ts": "2026-11-24T10:00:00"}', "d", 1795514400000),
        ]
    )
