"""Option parsing and the Arrow frame encoder: no Spark, no nodes, so these run in a blink
(javac building the reader jar is tests/integration/spark/test_jvm_reader.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from msgstore_spark.arrow_codec import encode_frame, messages_to_batch
from msgstore_spark.errors import OptionError
from msgstore_spark.options import EARLIEST, LATEST, read_options, write_options
from msgstore_spark.ranges import OffsetRange, pack_ranges

from storage_node.formats.limits import MAX_PARTITIONS
from storage_node.wire.batch_codec import decode_batch

BASE = {"endpoints": "http://127.0.0.1:1", "topic": "orders"}


def test_defaults_follow_kafka():
    batch = read_options(BASE, streaming=False)
    assert batch.starting == {"orders": {-1: EARLIEST}}
    assert batch.ending == {"orders": {-1: LATEST}}
    stream = read_options(BASE, streaming=True)
    assert stream.starting == {"orders": {-1: LATEST}}


def test_json_offsets_and_timestamps():
    opts = read_options(
        {
            **BASE,
            "startingOffsets": '{"orders": {"0": 5, "2": -2}}',
            "endingTimestamp": "1767225600000",
        },
        streaming=False,
    )
    assert opts.starting == {"orders": {0: 5, 2: EARLIEST}}
    assert opts.ending_ts == {"orders": {-1: 1767225600000}}


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topic": "orders"}, "endpoints"),
        ({"endpoints": "http://h:1"}, "topic"),
        ({"endpoints": "http://h:1", "topic": "a", "topics": "b"}, "topic"),
        ({**BASE, "topic": "../etc"}, "topic"),
        ({**BASE, "endpoints": "http://h:1/path"}, "endpoints"),
        ({**BASE, "startingOffsets": "yesterday"}, "startingOffsets"),
        ({**BASE, "startingOffsets": '{"other": {"0": 1}}'}, "startingOffsets"),
        ({**BASE, "startingOffsets": '{"orders": {"0": -5}}'}, "startingOffsets"),
        ({**BASE, "endingOffsets": "earliest"}, "endingOffsets"),
        ({**BASE, "endingOffsets": '{"orders": {"0": -2}}'}, "endingOffsets"),
        ({**BASE, "maxRecordsPerPartition": "0"}, "maxRecordsPerPartition"),
        ({**BASE, "maxRecordsPerPartition": "many"}, "maxRecordsPerPartition"),
        ({**BASE, "minRecordsPerTask": "0"}, "minRecordsPerTask"),
        ({**BASE, "minRecordsPerTask": "few"}, "minRecordsPerTask"),
        ({**BASE, "startingTimestamp": "noon"}, "startingTimestamp"),
        ({**BASE, "failOnDataLoss": "perhaps"}, "failOnDataLoss"),
    ],
)
def test_bad_read_options_name_the_option(options, named):
    with pytest.raises(OptionError) as info:
        read_options(options, streaming=False)
    assert f"'{named}'" in str(info.value)


def test_streams_have_no_end():
    with pytest.raises(OptionError, match="endingOffsets"):
        read_options({**BASE, "endingOffsets": "latest"}, streaming=True)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({**BASE, "topics": "a,b"}, "topics"),
        ({"endpoints": "http://h:1"}, "topic"),
        ({**BASE, "partitions": "0"}, "partitions"),
        ({**BASE, "partitions": str(MAX_PARTITIONS + 1)}, "partitions"),
        ({**BASE, "compression": "zip"}, "compression"),
        ({**BASE, "batchSize": "-1"}, "batchSize"),
    ],
)
def test_bad_write_options_name_the_option(options, named):
    with pytest.raises(OptionError) as info:
        write_options(options)
    assert f"'{named}'" in str(info.value)


def test_a_write_may_create_a_topic_of_every_size_the_store_takes():
    """The same bound as the store's (formats/limits), not one of its own."""
    assert write_options({**BASE, "partitions": str(MAX_PARTITIONS)}).create_partitions == (
        MAX_PARTITIONS
    )


def test_frame_from_arrow_decodes_with_the_node_codec():
    values = pa.array(["a", None, "ccc", "dd"], pa.string()).fill_null("")
    keys = pa.array(["k1", None, "k3", "ké"], pa.string())
    tags = pa.array([None, None, None, None], pa.string())
    ids = pa.array([None, "app-7f000001-1-2", None, None], pa.string())
    # a slice with a non-zero offset exercises the offset arithmetic
    sliced = pa.array(["zz", "x", "yy", "bin\x00"], pa.string()).slice(1)
    frame = encode_frame(
        sliced.cast(pa.binary()),
        keys.slice(1),
        tags.slice(1),
        ids.slice(1),
        np.array([5, -1, 7]),
        np.array([0, 1, 2]),
        "producer-1",
        42,
    )
    batch = decode_batch(frame)
    assert batch.values == [b"x", b"yy", b"bin\x00"]
    assert batch.keys == [None, "k3", "ké"]
    assert batch.tags == [None, None, None]
    assert batch.msg_ids == ["app-7f000001-1-2", None, None]
    assert batch.timestamps == [5, None, 7]
    assert batch.partitions == [0, 1, 2]
    assert (batch.producer_id, batch.sequence) == ("producer-1", 42)
    assert len(values) == 4


def test_read_page_to_arrow_keeps_binary_values():
    page = [
        {"offset": 3, "key": "k", "tag": None, "msg_id": "m", "timestamp": 1000, "value": "hi"},
        {
            "offset": 4,
            "key": None,
            "tag": "t",
            "msg_id": "n",
            "timestamp": 2000,
            "value_base64": "AP8=",
        },
    ]
    batch = messages_to_batch("orders", 1, page)
    rows = batch.to_pylist()
    assert rows[0]["value"] == b"hi" and rows[1]["value"] == b"\x00\xff"
    assert [r["offset"] for r in rows] == [3, 4]
    assert rows[1]["timestamp"].timestamp() == 2.0


def test_ca_option_and_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("MSGSTORE_CA", raising=False)
    assert read_options(BASE, streaming=False).conn.ca is None
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    tls = {"endpoints": "https://n0:8080,n1:8080", "topic": "orders", "ca": str(ca)}
    conn = read_options(tls, streaming=False).conn
    assert conn.ca == str(ca)
    with pytest.raises(OptionError, match="'endpoints'.*plain http but a CA is set"):
        read_options({**BASE, "ca": str(ca)}, streaming=False)
    with pytest.raises(OptionError, match="option 'ca'.*does not exist"):
        read_options({**tls, "ca": str(tmp_path / "missing.crt")}, streaming=False)
    monkeypatch.setenv("MSGSTORE_CA", str(ca))
    assert write_options({**tls, "ca": ""}).conn.ca == str(ca)
    assert conn.endpoints == ["https://n0:8080", "https://n1:8080"]


def test_pack_ranges_fills_tasks_up_to_the_target_within_the_cap():
    ranges = [OffsetRange("a", p, 0, 40) for p in range(5)] + [OffsetRange("b", 0, 0, 40)]
    ranges += [OffsetRange("a", 9, 5, 5)]  # empty: dropped
    tasks = pack_ranges(ranges, min_records=100, max_records=1000)
    # a task takes ranges while it holds fewer than 100; another topic starts a new task
    assert [[(r.topic, r.partition) for r in t.ranges] for t in tasks] == [
        [("a", 0), ("a", 1), ("a", 2)],
        [("a", 3), ("a", 4)],
        [("b", 0)],
    ]
    # the cap (maxRecordsPerPartition) is never passed, and a partition appears once a task
    capped = pack_ranges(ranges, min_records=100, max_records=80)
    assert [len(t.ranges) for t in capped] == [2, 2, 1, 1]
    pieces = [OffsetRange("a", 0, 0, 30), OffsetRange("a", 0, 30, 40)]
    assert [len(t.ranges) for t in pack_ranges(pieces, 100, 100)] == [1, 1]
    assert pack_ranges([], 100, 100) == []


def test_jvm_tasks_take_a_slice_of_every_partition():
    """The JVM reader's tasks: as many as cores (fewer for a small read, more where a slice
    would pass maxRecordsPerPartition), each holding every partition once, the slices
    covering each partition's range exactly; owners go with their partitions."""
    from msgstore_spark.jvm_reader import slice_tasks

    ranges = [OffsetRange("a", p, 0, 1000, f"http://n{p % 3}:1") for p in range(6)]
    ranges += [
        OffsetRange("a", 6, 1000, 1500, "http://n0:1"),
        OffsetRange("a", 6, 1500, 2000, "http://n0:1"),
    ]
    ranges += [OffsetRange("b", 0, 7, 7, "http://n1:1")]  # empty: no task
    tasks = slice_tasks(ranges, parallelism=4, min_records=1000, max_records=10_000)
    assert len(tasks) == 4 and {t["topic"] for t in tasks} == {"a"}
    for p in range(7):
        pieces = sorted((lo, hi) for t in tasks for q, lo, hi, _ in t["ranges"] if q == p)
        want = (1000, 2000) if p == 6 else (0, 1000)
        assert pieces[0][0] == want[0] and pieces[-1][1] == want[1]
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
    assert all(len({r[0] for r in t["ranges"]}) == len(t["ranges"]) for t in tasks)
    assert {r[3] for t in tasks for r in t["ranges"] if r[0] == 4} == {"http://n1:1"}
    assert len(slice_tasks(ranges, 4, min_records=100_000, max_records=10_000)) == 1
    assert len(slice_tasks(ranges, 2, min_records=1, max_records=100)) == 10  # 1000 / 100
