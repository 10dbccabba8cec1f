"""read_range against the real test cluster pages exactly through an offset range (the
Arrow conversion itself is tests/unit/spark/test_arrow_columns.py)."""

from __future__ import annotations

import base64
import threading

import pyarrow as pa
import pytest
from msgstore_spark.options import ConnectionOptions
from msgstore_spark.ranges import OffsetRange, read_range


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
