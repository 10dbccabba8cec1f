"""Packed columns, the batch key hash and numbered message IDs: array code against the plain
per-item definition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_node.errors import InvalidBatch
from storage_node.formats.keyhash import key_hash, key_hashes
from storage_node.formats.message_id import format_msg_id, numbered_ids, parse_msg_id
from storage_node.formats.packed import PackedBatch, PackedColumn
from storage_node.formats.partitioning import partitions_for_keys
from storage_node.store import partition_for_key

keys_strategy = st.lists(st.one_of(st.none(), st.text(max_size=40)), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(keys_strategy)
def test_batch_hash_equals_one_by_one(keys: list[str | None]) -> None:
    column = PackedColumn.of_text(keys, "key")
    got = key_hashes(column.blob, column.lens).tolist()
    assert got == [0 if k is None else key_hash(k) for k in keys]
    parts = partitions_for_keys(column.blob, column.lens, 7).tolist()
    assert parts == [-1 if k is None else partition_for_key(k, 7) for k in keys]


def test_hash_spreads_keys_evenly_over_partitions() -> None:
    keys = [f"user-{i:09d}" for i in range(80_000)]
    column = PackedColumn.of_text(keys, "key")
    for partitions in (2, 8, 16, 60):
        counts = np.bincount(partitions_for_keys(column.blob, column.lens, partitions))
        assert counts.min() > 0.9 * counts.mean() and counts.max() < 1.1 * counts.mean()
    assert len(set(key_hashes(column.blob, column.lens).tolist())) > 79_990


def test_long_and_non_ascii_keys_hash_alike() -> None:
    for keys in (
        ["k" * 65_535, "ключ", "", "日本語のキー"],
        [f"user-{i:09d}" for i in range(500)],  # one length: the matrix form
        ["", "", ""],
    ):
        column = PackedColumn.of_text(keys, "key")
        assert key_hashes(column.blob, column.lens).tolist() == [key_hash(k) for k in keys]


@pytest.mark.parametrize("first", [0, 1, 7, 95, 999_990, 10**12 - 3])
def test_numbered_ids_match_the_id_format(first: int) -> None:
    prefix = "orders-0a000001-491234-"
    column = numbered_ids(prefix.encode(), first, 20)
    got = [b.decode() for b in column.to_list()]  # type: ignore[union-attr]
    want = [format_msg_id("orders", 0x0A000001, 491234, first + i) for i in range(20)]
    assert got == want
    assert parse_msg_id(got[-1]).seq == first + 19


def test_packing_lists_checks_types_and_lengths() -> None:
    batch = PackedBatch.from_lists([b"a", b"bc"], ["k", None], None, None, [5, None], None)
    assert batch.values.to_list() == [b"a", b"bc"]
    assert batch.keys.lens.tolist() == [1, -1] and batch.tags.absent()
    assert batch.timestamps.tolist() == [5, -1] and batch.partitions is None  # type: ignore[union-attr]
    for bad in (
        {"values": [b"a"], "keys": [1]},
        {"values": [b"a"], "keys": ["x", "y"]},
        {"values": ["text"]},
        {"values": [b"a"], "timestamps": [-2]},
        {"values": [b"a"], "keys": ["\ud800"]},
    ):
        with pytest.raises(InvalidBatch):
            PackedBatch.from_lists(**bad)
