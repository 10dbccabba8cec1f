"""Binary read answers into Arrow: the RecordBatch built from buffers equals the one built
row by row from the JSON answer, for every field shape (absent, empty, non-UTF-8); and
read_range against the real test cluster pages exactly through an offset range."""

from __future__ import annotations

import base64
import threading

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgstore_spark.arrow_codec import READ_SCHEMA, columns_to_batch, messages_to_batch
from msgstore_spark.options import ConnectionOptions
from msgstore_spark.ranges import OffsetRange, read_range

from storage_node.store import Message
from storage_node.wire.batch_codec import decode_read_answer, encode_read_answer
from storage_node.wire.message_json import message_to_json

opt_text = st.one_of(st.none(), st.text(max_size=10))


@st.composite
def pages(draw):
    """One partition's page: rising offsets, any keys/tags/values."""
    n = draw(st.integers(0, 20))
    first = draw(st.integers(0, 2**40))
    return [
        Message(
            "orders",
            3,
            first + i,
            draw(opt_text),
            draw(opt_text),
            draw(st.text(min_size=1, max_size=20)),
            draw(st.integers(0, 2**42)),
            draw(st.integers(0, 2**42)),
            draw(st.binary(max_size=40)),
        )
        for i in range(n)
    ]


@settings(max_examples=100, deadline=None)
@given(pages(), st.integers(0, 25))
def test_columns_equal_the_json_conversion(page, limit):
    cols = decode_read_answer(encode_read_answer(page, None))
    expected = messages_to_batch("orders", 3, [message_to_json(m) for m in page])
    batch = columns_to_batch("orders", cols)
    batch.validate(full=True)
    assert batch.schema == READ_SCHEMA and batch.equals(expected)
    head = columns_to_batch("orders", cols, limit)
    head.validate(full=True)
    assert head.equals(expected.slice(0, min(limit, len(page))))


def test_non_utf8_values_and_nulls():
    page = [
        Message("t", 0, 0, None, None, "a", 1, 1, b"\xff\x00"),
        Message("t", 0, 1, "k\u00e9", "", "b", 2, 2, b""),
    ]
    batch = columns_to_batch("t", decode_read_answer(encode_read_answer(page, 2)))
    assert batch.column("value").to_pylist() == [b"\xff\x00", b""]
    assert batch.column("key").to_pylist() == [None, "k\u00e9"]
    assert batch.column("tag").to_pylist() == [None, ""]
    assert batch.column("topic").to_pylist() == ["t", "t"]
    assert batch.column("timestamp").type == pa.timestamp("us", tz="UTC")
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1000, 2000]


@pytest.mark.parametrize("topic", ["", "x", "a-much-longer.topic_name"])
def test_topic_column_for_any_name_length(topic):
    page = [Message(topic, 0, i, None, None, "id", 1, 1, b"v") for i in range(3)]
    batch = columns_to_batch(topic, decode_read_answer(encode_read_answer(page, 3)))
    batch.validate(full=True)
    assert batch.column("topic").to_pylist() == [topic] * 3


@pytest.fixture(scope="module")
def paged_topic(client):
    """One partition of 50 messages, every third tagged, some values not UTF-8."""
    client.create_topic("read-range-pages", 1)
    client.produce(
        "read-range-pages",
        [
            {
                "value_base64": base64.b64encode(bytes([0xFF, i])).decode(),
                "key": f"k{i}",
                "tag": "t" if i % 3 == 0 else None,
            }
            for i in range(50)
        ],
    )
    return "read-range-pages"


def _conn(cluster) -> ConnectionOptions:
    return ConnectionOptions(list(cluster.addresses), None, 30.0)


def test_read_range_pages_up_to_the_range_end(cluster, paged_topic):
    """Pages of 7 (the next one fetched while the current is handed over) and a range that
    ends mid-page: exactly the range's offsets, in order, values byte-exact."""
    batches = list(read_range(_conn(cluster), OffsetRange(paged_topic, 0, 3, 40), 7, None))
    assert len(batches) == 6  # 37 offsets in pages of 7
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == list(range(3, 40))
    assert table.column("value").to_pylist() == [bytes([0xFF, i]) for i in range(3, 40)]
    assert table.column("key").to_pylist() == [f"k{i}" for i in range(3, 40)]


def test_read_range_with_tag_cuts_rows_past_the_end(cluster, paged_topic):
    """With a tag the node skips offsets, so a page can run past the range: cut there."""
    batches = read_range(_conn(cluster), OffsetRange(paged_topic, 0, 0, 20), 5, "t")
    offsets = pa.Table.from_batches(list(batches)).column("offset").to_pylist()
    assert offsets == [0, 3, 6, 9, 12, 15, 18]


def test_read_range_past_the_partition_end_stops(cluster, paged_topic):
    batches = list(read_range(_conn(cluster), OffsetRange(paged_topic, 0, 45, 80), 100, None))
    assert pa.Table.from_batches(batches).column("offset").to_pylist() == list(range(45, 50))


def test_read_range_closed_early_stops_its_fetcher(cluster, paged_topic):
    before = {t.name for t in threading.enumerate()}
    pages = read_range(_conn(cluster), OffsetRange(paged_topic, 0, 0, 50), 5, None)
    first = next(pages)
    assert first.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    pages.close()
    leftover = {t.name for t in threading.enumerate()} - before
    assert not [name for name in leftover if name.startswith("msgstore-read")]
