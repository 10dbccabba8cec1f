"""Binary read answers into Arrow: the RecordBatch built from buffers equals the one built
row by row from the JSON answer, for every field shape (absent, empty, non-UTF-8). Paging
through a real cluster is tests/integration/spark/test_spark_read_columns.py."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgstore_spark.arrow_codec import READ_SCHEMA, columns_to_batch, messages_to_batch

from storage_node.store import Message
from storage_node.wire.message_json import message_to_json
from storage_node.wire.read_answer import decode_read_answer, encode_read_answer

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
